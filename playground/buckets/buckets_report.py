"""The buckets lab's report: every rank's per-strategy timings -> one row per strategy (the
slowest rank's median step beside the alpha-beta model of its schedule), notes on the fitted
link, and the step time against bucket cap when caps were swept."""

import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from playground.collectives import registry
from playground.collectives.check import describe_first_wrong, earliest_first_wrong
from playground.core.machine import load_note
from playground.core.sizes import format_size
from playground.display.plot import figure
from playground.display.report import Report, Table
from playground.models.costs import Link

COLUMNS = {
    "strategy": "strategy",
    "num_allreduces": "all-reduces",
    "messages": "msgs/rank (model)",
    "payload": "bytes/rank",
    "sent": "sent/rank",
    "measured_ms": "measured (ms)",
    "model_ms": "model (ms)",
    "diff_ms": "measured - model (ms)",
    "ratio": "measured/model",
    "loaded_model_ms": "model, loaded link (ms)",
    "wrong": "#wrong",
}


def schedule_time_s(link: Link, bucket_bytes: Iterable[int], num_ranks: int, algorithm: str) -> float:
    """The model of a schedule: its all-reduces back to back, each `algorithm`'s formula (the
    registry's, from playground/models/costs.py) on `link`."""
    return sum(registry.collective_time_s("allreduce", algorithm, n, num_ranks, link) for n in bucket_bytes)


def messages_per_rank(num_ranks: int, algorithm: str) -> int:
    """The messages one all-reduce sends one after another, by the model: the alphas of its
    formula (one second each, bytes free)."""
    return round(registry.collective_time_s("allreduce", algorithm, 1, num_ranks, Link(1.0, math.inf)))


def combine(results: list[dict], params) -> list[dict]:
    """One row per strategy: per pass the slowest rank's time (a step ends when the last rank
    does), then the median over passes."""
    n = len(results)
    ab, abl = results[0]["alpha_beta"], results[0]["alpha_beta_loaded"]
    model = Link(ab["alpha_s"], ab["beta_bytes_per_s"]) if ab else None
    loaded = Link(abl["alpha_s"], abl["beta_bytes_per_s"]) if abl else None
    rows = []
    for k, base in enumerate(results[0]["rows"]):
        per_rank = [res["rows"][k] for res in results]
        slowest = [max(r["times_s"][i] for r in per_rank) for i in range(len(base["times_s"]))]
        measured = float(np.median(slowest))
        model_s = schedule_time_s(model, base["bucket_bytes"], n, params.algorithm) if model else float("nan")
        rows.append(
            {
                "strategy": base["strategy"],
                "cap_mb": base["cap_mb"],
                "num_allreduces": base["num_allreduces"],
                "messages": base["num_allreduces"] * messages_per_rank(n, params.algorithm),
                "payload": format_size(sum(base["bucket_bytes"])),
                "sent": format_size(base["sent_bytes"]),
                "measured_ms": measured * 1e3,
                "model_ms": model_s * 1e3,
                "diff_ms": (measured - model_s) * 1e3,
                "ratio": measured / model_s if model and model_s > 0 else float("nan"),
                "loaded_model_ms": (
                    schedule_time_s(loaded, base["bucket_bytes"], n, params.algorithm) * 1e3
                    if loaded
                    else float("nan")
                ),
                "wrong": sum(r["wrong"] for r in per_rank),
            }
        )
        first = earliest_first_wrong(per_rank)
        if first:
            rows[-1]["first_wrong"] = first
    return rows


def plot_sweep(rows: list[dict], path) -> bool:
    """Step time against bucket cap (measured and modelled), per-tensor and single as lines."""
    swept = sorted((r for r in rows if r["cap_mb"] is not None), key=lambda r: r["cap_mb"])
    if not swept:
        return False
    with figure(path, (7, 4.2), dpi=120) as (_, ax):
        caps = [r["cap_mb"] for r in swept]
        ax.plot(caps, [r["measured_ms"] for r in swept], "o-", label="bucketed, measured")
        ax.plot(caps, [r["model_ms"] for r in swept], "s--", label="bucketed, alpha-beta model")
        for r, style in (
            (next((x for x in rows if x["strategy"] == "per-tensor"), None), ":"),
            (next((x for x in rows if x["strategy"] == "single bucket"), None), "-."),
        ):
            if r:
                ax.axhline(
                    r["measured_ms"], linestyle=style, color="gray", label=f"{r['strategy']}, measured"
                )
        ax.set_xscale("log")
        ax.set_xlabel("bucket cap (MiB)")
        ax.set_ylabel("all-reduce time per step (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    return True


def report(results: list[dict], params, run_dir: Path) -> Report:
    """The buckets lab's report from every rank's result (`params`: the node's Params)."""
    n = len(results)
    rows = combine(results, params)
    r0 = results[0]
    failures = [
        f"{r['strategy']}: {r['wrong']} wrong elements (summed over ranks; {describe_first_wrong(r['first_wrong'])})"
        for r in rows
        if r["wrong"]
    ]
    scaled = "real sizes" if params.scale == 1 else f"sizes x{params.scale:g} (tensors and caps)"
    title = (
        f"gradient all-reduce, {params.source}: {r0['num_tensors']} tensors, "
        f"{format_size(r0['total_bytes'])} float32 per rank, {scaled}; {n} ranks, {params.algorithm}; "
        f"slowest rank, median of {params.iters}"
    )
    notes = []
    ab = r0["alpha_beta"]
    if ab:
        notes.append(
            f"alpha-beta from ping-pong rank 0 <-> 1: alpha = {ab['alpha_s'] * 1e6:.1f} us, "
            f"beta = {ab['beta_bytes_per_s'] / 1e9:.3f} GB/s (n_1/2 = "
            f"{format_size(int(ab['alpha_s'] * ab['beta_bytes_per_s']))})"
        )
        abl = r0["alpha_beta_loaded"]
        notes.append(
            f"the same ping-pong with every pair of ranks talking at once (as in a ring): alpha = "
            f"{abl['alpha_s'] * 1e6:.1f} us, beta = {abl['beta_bytes_per_s'] / 1e9:.3f} GB/s "
            "(column 'model, loaded link')"
        )
        notes.append(
            f"model: {params.algorithm} all-reduce ({registry.get('allreduce', params.algorithm).summary}) "
            "with this fit's alpha and beta, reductions free, summed over the schedule's all-reduces "
            "(formulas: playground/models/costs.py)"
        )
    else:
        notes.append("one rank: nothing is sent, so there is no alpha-beta fit and the model predicts 0")
    cores = os.cpu_count() or 1
    notes.append(load_note())
    if n > cores:
        notes.append(
            f"{n} ranks on {cores} cores: oversubscribed, so ranks time-share the CPUs and measured "
            "times include waiting for a core"
        )
    files = []
    run_dir = Path(run_dir)
    if plot_sweep(rows, run_dir / "buckets.png"):
        files.append("buckets.png")
        notes.append(f"plot: {run_dir / 'buckets.png'}")
    return Report(
        ok=not failures,
        tables=[Table(title, rows, COLUMNS)],
        notes=notes,
        failures=failures,
        files=files,
        data={"alpha_beta": ab, "algorithm": params.algorithm},
    )
