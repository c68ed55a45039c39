"""The queue lab's report: per-load figures (see `queue_stats`) -> four tables, notes, one plot.

Tables: latency beside the model (M/M/1 for exponential service, M/D/1 for fixed) and the
replay; percentiles; Little's law; where the time goes. The notes say how to read each gap, so a
deviation on a busy shared machine reads as what it is rather than as a wrong formula.
"""

import math
from pathlib import Path

import numpy as np

from playground.core.machine import load_note
from playground.display.plot import figure
from playground.display.report import Report, Table
from playground.models import queueing as qm
from playground.queueing.queue_stats import deviation_pct

PLOT = "latency_vs_load.png"
WHERE_KEYS = {
    "load": "load",
    "demand_mean_ms": "service asked",
    "delivered_mean_ms": "delivered",
    "overshoot_mean_ms": "service error",
    "overhead_mean_ms": "measured - replay",
    "replay_delivered_mean_ms": "replay (delivered)",
    "messaging_mean_ms": "measured - replay (delivered)",
    "late_send_mean_ms": "send late",
    "late_send_p99_ms": "send late p99",
}


def model_names(service: str) -> tuple[str, str]:
    """(the model of this service, the other one), e.g. ("M/D/1", "M/M/1") for fixed service."""
    return ("M/M/1", "M/D/1") if service == "exponential" else ("M/D/1", "M/M/1")


def latency_row(r: dict, service: str) -> dict:
    other_key = "md1_mean_ms" if service == "exponential" else "mm1_mean_ms"
    return {
        "load": r["load"],
        "rate_per_s": r["rate_per_s"],
        "mean_ms": r["mean_ms"],
        "model_mean_ms": r["model_mean_ms"],
        "dev_pct": deviation_pct(r["mean_ms"], r["model_mean_ms"]),
        "replay_mean_ms": r["replay_mean_ms"],
        "other_mean_ms": r[other_key],
        "eff_load": r["eff_load"],
        "eff_model_mean_ms": r["eff_model_mean_ms"],
    }


def percentile_row(r: dict) -> dict:
    return {
        "load": r["load"],
        "p50_ms": r["p50_ms"],
        "model_p50_ms": r["model_p50_ms"],
        "dev_p50_pct": deviation_pct(r["p50_ms"], r["model_p50_ms"]),
        "p99_ms": r["p99_ms"],
        "model_p99_ms": r["model_p99_ms"],
        "dev_p99_pct": deviation_pct(r["p99_ms"], r["model_p99_ms"]),
        "replay_p99_ms": r["replay_p99_ms"],
    }


def little_row(r: dict) -> dict:
    return {
        "load": r["load"],
        "L": r["little_L"],
        "rate_per_s": r["little_rate_per_s"],
        "W_ms": r["little_W_ms"],
        "lambda_W": r["little_lambda_W"],
        "dev_pct": deviation_pct(r["little_L"], r["little_lambda_W"]),
        "window_s": r["little_window_s"],
    }


def tables(loads: list[dict], p) -> list[Table]:
    model, other = model_names(p.service)
    return [
        Table(
            f"Latency vs load, {p.service} service, S = {p.service_ms} ms ({model} is the model)",
            [latency_row(r, p.service) for r in loads],
            {
                "load": "load",
                "rate_per_s": "req/s",
                "mean_ms": "mean ms",
                "model_mean_ms": f"{model} ms",
                "dev_pct": "dev %",
                "replay_mean_ms": "replay ms",
                "other_mean_ms": f"{other} ms",
                "eff_load": "eff. load",
                "eff_model_mean_ms": f"{model} @eff ms",
            },
        ),
        Table(
            "Percentiles",
            [percentile_row(r) for r in loads],
            {
                "load": "load",
                "p50_ms": "p50 ms",
                "model_p50_ms": f"{model} p50",
                "dev_p50_pct": "dev %",
                "p99_ms": "p99 ms",
                "model_p99_ms": f"{model} p99",
                "dev_p99_pct": "dev %",
                "replay_p99_ms": "replay p99",
            },
        ),
        Table(
            "Little's law: time-average number in system L vs lambda x W (arrival window)",
            [little_row(r) for r in loads],
            {
                "load": "load",
                "L": "L measured",
                "rate_per_s": "lambda /s",
                "W_ms": "W ms",
                "lambda_W": "lambda x W",
                "dev_pct": "dev %",
                "window_s": "window s",
            },
        ),
        Table("Where the time goes (ms, means)", [{k: r[k] for k in WHERE_KEYS} for r in loads], WHERE_KEYS),
    ]


def notes(loads: list[dict], p) -> list[str]:
    worst = max(loads, key=lambda r: abs(deviation_pct(r["mean_ms"], r["model_mean_ms"])))
    out = [
        (
            "exact_load: the sampled gaps and demands were rescaled so their means are exactly 1/lambda and S "
            f"(removes the sampling error of {p.num_requests} draws' means, +-{100 / math.sqrt(p.num_requests):.0f}% "
            "for exponential service, which alone moves a nominal rho = 0.95 far up or down)."
            if p.exact_load
            else "exact_load=false: the sample means of gaps and demands differ from 1/lambda and S."
        ),
        "replay = an ideal FIFO server fed this run's exact send times and service demands: "
        "measured - replay is overhead (ZeroMQ hops, timer overshoot, scheduling); replay - formula is sampling noise.",
        f"eff. load = measured arrival rate x delivered service time; at high load a few % more service "
        f"is a much longer queue (S / (1 - rho)). Largest deviation: load {worst['load']} "
        f"{deviation_pct(worst['mean_ms'], worst['model_mean_ms']):+.0f}% (replay {worst['replay_mean_ms']:.1f} ms, "
        f"effective load {worst['eff_load']:.3f}; '-' in the @eff column when it is >= 0.99).",
        "Where the time goes: service error = delivered - asked (late wake-ups when the 2 shared cores are busy; "
        "with compensate=true the next services pay it back); replay (delivered) uses the service times the "
        "server really gave, so measured - replay (delivered) is the ZeroMQ hops and the client's own delays.",
        "Little: L is the time-average of N(t) integrated from the send/reply stamps over the arrival window "
        "(first measured send to last send). Over a window that starts and ends empty L = lambda W holds by "
        "construction; here the requests cut at the window's edges make the two differ by about W / window, "
        "which shrinks as the run gets longer.",
    ]
    high = [r for r in loads if r["load"] >= 0.9]
    if high:
        r = high[-1]
        relax_s = p.service_ms / 1000 / (1 - r["load"]) ** 2
        span_s = p.num_requests * p.service_ms / 1000 / r["load"]
        noisy = (
            "so the mean and p99 are noisy"
            if span_s < 20 * relax_s
            else "long enough for the mean to settle within ~10-20%"
        )
        out.append(
            f"At load {r['load']} the queue's relaxation time is about S/(1-rho)^2 = {relax_s:.1f} s and the "
            f"run lasts {span_s:.1f} s ({p.num_requests} requests), {noisy} (the lecture used 200,000 per load; "
            "--set params.num_requests=20000 goes longer)."
        )
    out.append(load_note())
    out.append(
        "Timestamps are CLOCK_MONOTONIC on one host (1 ns resolution, sleep wake-ups ~0.05-0.2 ms late, "
        "more when the 2 shared cores are busy); the server runs on one core, client + receiver on the other."
    )
    return out


def plot(loads: list[dict], p, path: Path) -> None:
    """Mean and p99 latency against load: both models' curves, the measurement and the replay."""
    s = p.service_ms / 1000
    rho = np.linspace(0.01, max(0.97, max(r["load"] for r in loads)), 200)
    model, _ = model_names(p.service)
    q99 = qm.mm1_sojourn_quantile_s if p.service == "exponential" else qm.md1_sojourn_quantile_s
    grid99 = np.append(rho[::10], rho[-1])
    x = [r["load"] for r in loads]
    with figure(path, (7, 4.5)) as (_, ax):
        ax.plot(rho, [1000 * qm.mm1_mean_sojourn_s(s, r) for r in rho], "C0-", label="M/M/1 mean")
        ax.plot(rho, [1000 * qm.md1_mean_sojourn_s(s, r) for r in rho], "C1-", label="M/D/1 mean")
        ax.plot(grid99, [1000 * q99(s, r, 0.99) for r in grid99], "C2--", label=f"{model} p99")
        ax.plot(x, [r["mean_ms"] for r in loads], "ko", label="measured mean")
        ax.plot(x, [r["p99_ms"] for r in loads], "k^", label="measured p99")
        ax.plot(x, [r["replay_mean_ms"] for r in loads], "rx", label="replay mean (same samples)")
        ax.set_yscale("log")
        ax.set_xlabel("load rho")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"Single server, {p.service} service, S = {p.service_ms} ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)


def report(loads: list[dict], p, run_dir: Path) -> Report:
    """The queue lab's report from the client's per-load figures (`p`: the node's Params)."""
    plot(loads, p, Path(run_dir) / PLOT)
    return Report(
        ok=True, tables=tables(loads, p), notes=notes(loads, p), data={"loads": loads}, files=[PLOT]
    )
