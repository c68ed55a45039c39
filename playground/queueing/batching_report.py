"""The batching lab's report: per-rate rows (see `batching_stats`) -> throughput and capacity
tables, notes on how to read them, and throughput/latency plots against offered load."""

from pathlib import Path

import numpy as np

from playground.core.machine import load_note
from playground.display.plot import figure
from playground.display.report import Report, Table
from playground.models import queueing as qm
from playground.queueing.batching_stats import capacity_rows, with_deviation

PLOT = "batching.png"
COLUMNS = {
    "mode": "mode",
    "offered_per_s": "offered /s",
    "arrived_per_s": "arrived /s",
    "throughput_per_s": "throughput /s",
    "model_per_s": "model /s",
    "dev_pct": "dev %",
    "replay_per_s": "replay /s",
    "mean_ms": "mean ms",
    "replay_mean_ms": "replay ms",
    "p99_ms": "p99 ms",
    "mean_batch": "batch",
    "replay_batch": "replay batch",
    "fluid_batch": "fluid batch",
    "dropped": "dropped",
}
CAPACITY_COLUMNS = {
    "mode": "mode",
    "max_batch": "max batch",
    "model_per_s": "model /s",
    "best_per_s": "measured /s",
    "dev_pct": "dev %",
    "saturated": "saturated",
}


def notes(p) -> list[str]:
    return [
        f"Cost of a batch of b: {p.fixed_s * 1000:g} ms + {p.per_item_s * 1000:g} ms x b. Capacity one at a time "
        f"1 / {1000 * (p.fixed_s + p.per_item_s):g} ms; batched {p.max_batch} / "
        f"{1000 * qm.batch_service_s(p.max_batch, p.fixed_s, p.per_item_s):g} ms (lecture: about 48/s vs about 615/s).",
        "model /s = min(arrived /s, capacity): arrived is the rate the client really sent at (Poisson count, "
        "and late sends when the machine is busy). "
        "measured max throughput only reaches capacity when an offered rate exceeds it (saturated = yes); "
        "below capacity throughput simply equals the offered rate.",
        "Unstable rows (offered > capacity): latency grows with the run's length, so the mean is not a property "
        f"of the server; after {p.drain_s:g} s of draining the backlog is dropped (column dropped).",
        "replay = the ideal batching server on this run's send times; batch = mean batch a request rode in; "
        "fluid batch = b = lambda (fixed + per_item b), capped: right under heavy load, too small near idle, "
        "where Poisson bunching still forms batches of 2-4.",
        "throughput counts replies in the last three quarters of the sending window (the first quarter fills "
        "the queue). At 20/s only ~20 replies fall in it, so its ratio to the model is noisy; replay /s, "
        "the ideal server on the same arrivals, shows the same count.",
        load_note(),
    ]


def plot(rows: list[dict], p, path: Path) -> None:
    """Throughput (left) and mean latency (right) against offered load, one colour per mode."""
    with figure(path, (11, 4.2), ncols=2) as (fig, (ax1, ax2)):
        for mode, color in zip(p.modes(), ("C0", "C1"), strict=False):
            mine = [r for r in rows if r["max_batch"] == mode]
            x = [r["offered_per_s"] for r in mine]
            cap = mine[0]["capacity_per_s"]
            label = mine[0]["mode"]
            ax1.plot(x, [r["throughput_per_s"] for r in mine], "o-", color=color, label=f"{label} measured")
            grid = np.linspace(0, max(x), 200)
            ax1.plot(grid, np.minimum(grid, cap), "--", color=color, label=f"{label} model (cap {cap:.0f}/s)")
            ax2.plot(x, [r["mean_ms"] for r in mine], "o-", color=color, label=f"{label} mean")
            ax2.plot(x, [r["replay_mean_ms"] for r in mine], "x:", color=color, label=f"{label} replay")
        ax1.set_xlabel("offered load (req/s)")
        ax1.set_ylabel("throughput (req/s)")
        ax1.grid(alpha=0.3)
        ax1.legend(fontsize=8)
        ax2.set_xlabel("offered load (req/s)")
        ax2.set_ylabel("latency (ms)")
        ax2.set_yscale("log")
        ax2.grid(alpha=0.3, which="both")
        ax2.legend(fontsize=8)
        fig.suptitle(
            f"Batching: {p.fixed_s * 1000:g} ms + {p.per_item_s * 1000:g} ms x batch, max {p.max_batch}"
        )


def report(rows: list[dict], p, run_dir: Path) -> Report:
    """The batching lab's report from the client's rows (`p`: the node's Params)."""
    rows = with_deviation(rows)
    capacity = capacity_rows(rows, p.modes())
    plot(rows, p, Path(run_dir) / PLOT)
    return Report(
        ok=True,
        tables=[
            Table("Throughput and latency vs offered load", rows, COLUMNS),
            Table("Capacity: best measured throughput vs model", capacity, CAPACITY_COLUMNS),
        ],
        notes=notes(p),
        data={"capacity": capacity},
        files=[PLOT],
    )
