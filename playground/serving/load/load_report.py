"""The sweep's tables (each fits 80 columns), its notes and its plot: latency against load, the
knee marked, the queueing models beside the measurements."""

import math
from pathlib import Path

from playground.display.plot import figure
from playground.display.report import Table
from playground.serving.load.load_stats import QueueModel, knee, max_rate_meeting

THROUGHPUT_COLUMNS = {
    "setup": "setup",
    "rate": "rate/s",
    "req_s": "req/s",
    "tok_s": "tok/s",
    "e2e_p50_ms": "E2E p50",
    "e2e_p90_ms": "E2E p90",
    "e2e_p99_ms": "E2E p99",
    "goodput_req_s": "goodput/s",
    "slo_met": "in SLO",
}
LATENCY_COLUMNS = {
    "setup": "setup",
    "rate": "rate/s",
    "ttft_p50_ms": "TTFT p50",
    "ttft_p90_ms": "p90",
    "ttft_p99_ms": "p99",
    "tpot_p50_ms": "TPOT p50",
    "tpot_p90_ms": "p90",
    "tpot_p99_ms": "p99",
}
MODEL_COLUMNS = {
    "setup": "setup",
    "rate": "rate/s",
    "in_flight": "in flight",
    "itl_p99_ms": "TBT p99",
    "failed": "failed",
    "md1_p99_ms": "M/D/1 p99",
    "batched_ms": "batched",
}


def tables(rows: list[dict]) -> list[Table]:
    return [
        Table("Throughput, end-to-end latency (ms) and goodput against load", rows, THROUGHPUT_COLUMNS),
        Table("Time to first token and time per output token (ms)", rows, LATENCY_COLUMNS),
        Table(
            "The queueing models (ms): one at a time (M/D/1 p99), batched (mean); TBT: time between tokens",
            rows,
            MODEL_COLUMNS,
        ),
    ]


def notes(setup: str, rows: list[dict], model: QueueModel | None, slo_tbt_ms: float) -> list[str]:
    measured = knee(rows)
    out = [
        f"{setup}: the knee (p99 E2E over twice the lowest rate's) "
        + (f"at {measured:g} requests/s" if measured else "not reached in this sweep")
    ]
    if model:
        out.append(
            f"{setup}: a request alone takes {1e3 * model.alone_s:.0f} ms; one at a time (M/D/1) the knee would "
            f"be at {model.md1_knee():.2f}/s; batched, each sequence adds {1e3 * model.per_seq_step_s:.2f} ms to "
            f"a step, so the knee moves to {model.batched_knee():.2f}/s"
            + (f" ({model.batched_knee() / model.md1_knee():.1f}x)" if model.md1_knee() > 0 else "")
        )
    best = max_rate_meeting(rows, "itl_p99_ms", slo_tbt_ms)
    out.append(
        f"{setup}: the highest rate with p99 time between tokens <= {slo_tbt_ms:g} ms: "
        + (f"{best:g}/s" if best else "none of the sweep")
    )
    return out


def plot(rows_by_setup: dict[str, list[dict]], models: dict[str, QueueModel | None], path: Path) -> None:
    with figure(path, (8, 4.8)) as (_, ax):
        for k, (setup, rows) in enumerate(rows_by_setup.items()):
            color = f"C{k}"
            rates = [r["rate"] for r in rows]
            ax.plot(rates, [r["e2e_p99_ms"] for r in rows], "o-", color=color, label=f"{setup}: E2E p99")
            ax.plot(
                rates, [r["e2e_p50_ms"] for r in rows], "s--", color=color, ms=3, label=f"{setup}: E2E p50"
            )
            model = models.get(setup)
            if model:
                md1 = [1e3 * model.md1_p99_s(r) for r in rates]
                batched = [1e3 * model.batched_mean_s(r) for r in rates]
                ax.plot(
                    rates,
                    [v if math.isfinite(v) else None for v in md1],
                    ":",
                    color=color,
                    label=f"{setup}: one at a time (M/D/1 p99)",
                )
                ax.plot(
                    rates,
                    [v if math.isfinite(v) else None for v in batched],
                    "-.",
                    color=color,
                    label=f"{setup}: batched model (mean)",
                )
                for rate, what in ((model.md1_knee(), "M/D/1"), (model.batched_knee(), "batched")):
                    if rates[0] <= rate <= rates[-1]:
                        ax.axvline(rate, color=color, ls=":", alpha=0.5)
                        ax.annotate(
                            f"{what} knee",
                            (rate, ax.get_ylim()[1]),
                            color=color,
                            fontsize=7,
                            rotation=90,
                            va="top",
                        )
            measured = knee(rows)
            if measured:
                ax.axvline(measured, color=color, alpha=0.4)
                ax.annotate(
                    f"knee {measured:g}/s",
                    (measured, ax.get_ylim()[0]),
                    color=color,
                    fontsize=8,
                    rotation=90,
                    va="bottom",
                )
        ax.set_yscale("log")
        ax.set_xlabel("offered load (requests/s, Poisson)")
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title("Latency against load: the knee, and the queueing models")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
