"""A real single-server queue under open-loop Poisson load, beside M/M/1 and M/D/1 (lecture 2.3).

Rank 0 is the server: it takes requests in arrival order and "serves" each for the service time
the request carries (sleep, then spin the last fraction of a millisecond). Rank 1 is an open-loop
client: it sends at Poisson times whatever the replies do, and a receiver thread timestamps the
replies. For each load rho the client sends `num_requests` at rate rho / S, waits for all replies
(so every load starts empty), and computes:

- mean / p50 / p99 latency (send to reply) beside M/M/1 (exponential service) and M/D/1 (fixed);
- the *replay*: an ideal FIFO server fed the exact arrivals and service demands of the run; its
  gap to the measurement is messaging and timer overhead, its gap to the formula is sampling;
- Little's law: the time-average number in the system, integrated from the arrival and
  departure stamps over the arrival window, against measured arrival rate x mean latency.
"""

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import zmq

from playground.concurrency.timing import machine_note
from playground.errors import ParamError
from playground.models import queueing as qm
from playground.plot import figure
from playground.queueing.batchserver import run_batch_server
from playground.queueing.loadgen import (
    STOP,
    OpenLoopClient,
    bind_random,
    check_server_and_client,
    poisson_arrivals_s,
    run_server_and_client,
    service_times_s,
)
from playground.report import Report, Table


@dataclass(frozen=True)
class Params:
    loads: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 0.95)
    service_ms: float = 5.0
    service: Literal["exponential", "fixed"] = "exponential"
    num_requests: int = 600  # per load
    warmup_requests: int = 30  # per load, sent but left out of the latency statistics
    spin_tail_ms: float = 0.3  # the server spins this last part of each service instead of sleeping
    compensate: bool = True  # pay back late wake-ups on the next service, so the mean load is as asked
    exact_load: bool = True  # rescale sampled gaps and demands so this run's realised load is exactly rho
    seed: int = 1

    def __post_init__(self):
        if not self.loads or any(not 0 < x < 1 for x in self.loads):
            raise ParamError("loads", f"each must be in (0, 1), got {list(self.loads)}")
        if self.service_ms <= 0:
            raise ParamError("service_ms", f"must be > 0, got {self.service_ms}")
        if self.num_requests < 20:
            raise ParamError("num_requests", f"must be >= 20, got {self.num_requests}")
        if not 0 <= self.warmup_requests <= self.num_requests - 10:
            raise ParamError(
                "warmup_requests", f"must be in [0, num_requests - 10], got {self.warmup_requests}"
            )
        if self.spin_tail_ms < 0:
            raise ParamError("spin_tail_ms", f"must be >= 0, got {self.spin_tail_ms}")


def check_scenario(params: Params, ranks: int) -> None:
    check_server_and_client("queue", ranks)


def main(comm, params: Params) -> dict:
    return run_server_and_client(comm, params, _serve, _load)


def _serve(comm, ctx: zmq.Context, p: Params) -> dict:
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)
    address = bind_random(pull)
    addresses = comm.allgather_obj(address)
    push.connect(addresses[1])
    total = len(p.loads) * p.num_requests

    def progress(served: int, load_id: int) -> None:
        if served % 50 == 0 or served == total:
            comm.progress(served, total, "requests served")

    stats = run_batch_server(
        pull,
        push,
        cost_s=lambda batch: batch[0][2],  # the request carries its service demand
        max_batch_of=lambda item: 1,
        spin_tail_s=p.spin_tail_ms / 1000,
        idle_timeout_s=comm.timeout_s,
        on_served=progress,
        check_alive=getattr(comm, "check_abort", None),
        compensate=p.compensate,
    )
    return {"ok": True, "role": "server", **stats}


def _load(comm, ctx: zmq.Context, p: Params) -> dict:
    n = p.num_requests
    client = OpenLoopClient(ctx, capacity=len(p.loads) * n)
    addresses = comm.allgather_obj(client.reply_address)
    client.connect(addresses[0])
    rng = np.random.default_rng(p.seed)
    service_s = p.service_ms / 1000
    rows, raw = [], {}
    try:
        for k, rho in enumerate(p.loads):
            first = k * n
            offsets = poisson_arrivals_s(rho / service_s, n, rng)
            demand = service_times_s(service_s, n, p.service, rng)
            if p.exact_load:  # variance reduction: same shapes, sample means pinned to 1/lambda and S
                offsets *= n * service_s / rho / offsets[-1]
                demand *= service_s / demand.mean()
            t0 = time.monotonic() + 0.02
            for i in range(n):
                client.send_at(t0 + offsets[i], first + i, k, float(demand[i]))
            if not client.wait_received(first + n, comm.timeout_s):
                return {
                    "ok": False,
                    "error": f"load {rho}: only {client.received - first} of {n} replies "
                    f"within {comm.timeout_s:.0f}s",
                }
            ids = slice(first, first + n)
            raw[f"load{k}"] = np.stack(
                [
                    t0 + offsets,
                    client.t_send_s[ids],
                    client.t_start_s[ids],
                    client.t_end_s[ids],
                    client.t_recv_s[ids],
                    demand,
                ]
            )
            rows.append(load_stats(rho, service_s, p.service, p.warmup_requests, raw[f"load{k}"]))
    finally:
        client.send_control(STOP, 0)
        client.close()
    np.savez(comm.run_dir / "queue-requests.npz", **raw)  # rows: scheduled, send, start, end, recv, demand
    return {"ok": True, "role": "client", "loads": rows}


def load_stats(rho: float, service_s: float, kind: str, warmup: int, stamps: np.ndarray) -> dict:
    """Measured figures of one load, the models beside them, and where the time went (all ms)."""
    scheduled, sent, start, end, recv, demand = stamps
    steady = slice(warmup, None)
    latency = (recv - sent)[steady]
    replay = (qm.fifo_departures(sent, demand) - sent)[steady]
    delivered = end - start
    replay_delivered = (qm.fifo_departures(sent, delivered) - sent)[steady]
    window = (sent[warmup], sent[-1])
    in_window = (sent >= window[0]) & (sent <= window[1])
    rate = (np.count_nonzero(in_window) - 1) / (window[1] - window[0])
    mean_latency_s = float(np.mean((recv - sent)[in_window]))
    eff_rho = rate * float(np.mean(delivered))
    model_mean = qm.mm1_mean_sojourn_s if kind == "exponential" else qm.md1_mean_sojourn_s
    model_q = qm.mm1_sojourn_quantile_s if kind == "exponential" else qm.md1_sojourn_quantile_s
    ms = 1000.0
    return {
        "load": rho,
        "rate_per_s": rho / service_s,
        "num": int(latency.size),
        "mean_ms": float(np.mean(latency)) * ms,
        "p50_ms": float(np.percentile(latency, 50)) * ms,
        "p99_ms": float(np.percentile(latency, 99)) * ms,
        "model_mean_ms": model_mean(service_s, rho) * ms,
        "model_p50_ms": model_q(service_s, rho, 0.5) * ms,
        "model_p99_ms": model_q(service_s, rho, 0.99) * ms,
        "mm1_mean_ms": qm.mm1_mean_sojourn_s(service_s, rho) * ms,
        "md1_mean_ms": qm.md1_mean_sojourn_s(service_s, rho) * ms,
        "replay_mean_ms": float(np.mean(replay)) * ms,
        "replay_p99_ms": float(np.percentile(replay, 99)) * ms,
        "replay_delivered_mean_ms": float(np.mean(replay_delivered)) * ms,
        "eff_load": eff_rho,
        "eff_model_mean_ms": model_mean(float(np.mean(delivered)), eff_rho) * ms
        if eff_rho < 0.99
        else math.nan,
        "demand_mean_ms": float(np.mean(demand)) * ms,
        "delivered_mean_ms": float(np.mean(delivered)) * ms,
        "overshoot_mean_ms": float(np.mean(delivered - demand)) * ms,
        "overhead_mean_ms": float(np.mean(latency) - np.mean(replay)) * ms,
        "messaging_mean_ms": float(np.mean(latency) - np.mean(replay_delivered)) * ms,
        "late_send_mean_ms": float(np.mean(sent - scheduled)) * ms,
        "late_send_p99_ms": float(np.percentile(sent - scheduled, 99)) * ms,
        "little_L": qm.time_average_in_system(sent, recv, *window),
        "little_rate_per_s": rate,
        "little_W_ms": mean_latency_s * ms,
        "little_lambda_W": qm.little_number_in_system(rate, mean_latency_s),
        "little_window_s": float(window[1] - window[0]),
    }


def _dev(measured: float, model: float) -> float:
    return 100.0 * (measured / model - 1.0) if model else math.nan


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    failures = [
        f"rank {r}: {res.get('error', 'not ok')}" for r, res in enumerate(results) if not res.get("ok")
    ]
    loads = results[1].get("loads", []) if len(results) > 1 else []
    if failures or not loads:
        return Report(ok=False, tables=[], failures=failures or ["client returned no loads"])
    model, other = ("M/M/1", "M/D/1") if params.service == "exponential" else ("M/D/1", "M/M/1")
    other_key = "md1_mean_ms" if params.service == "exponential" else "mm1_mean_ms"
    latency, tails, little, where = [], [], [], []
    for r in loads:
        latency.append(
            {
                "load": r["load"],
                "rate_per_s": r["rate_per_s"],
                "mean_ms": r["mean_ms"],
                "model_mean_ms": r["model_mean_ms"],
                "dev_pct": _dev(r["mean_ms"], r["model_mean_ms"]),
                "replay_mean_ms": r["replay_mean_ms"],
                "other_mean_ms": r[other_key],
                "eff_load": r["eff_load"],
                "eff_model_mean_ms": r["eff_model_mean_ms"],
            }
        )
        tails.append(
            {
                "load": r["load"],
                "p50_ms": r["p50_ms"],
                "model_p50_ms": r["model_p50_ms"],
                "dev_p50_pct": _dev(r["p50_ms"], r["model_p50_ms"]),
                "p99_ms": r["p99_ms"],
                "model_p99_ms": r["model_p99_ms"],
                "dev_p99_pct": _dev(r["p99_ms"], r["model_p99_ms"]),
                "replay_p99_ms": r["replay_p99_ms"],
            }
        )
        little.append(
            {
                "load": r["load"],
                "L": r["little_L"],
                "rate_per_s": r["little_rate_per_s"],
                "W_ms": r["little_W_ms"],
                "lambda_W": r["little_lambda_W"],
                "dev_pct": _dev(r["little_L"], r["little_lambda_W"]),
                "window_s": r["little_window_s"],
            }
        )
        where.append(
            {
                k: r[k]
                for k in (
                    "load",
                    "demand_mean_ms",
                    "delivered_mean_ms",
                    "overshoot_mean_ms",
                    "overhead_mean_ms",
                    "replay_delivered_mean_ms",
                    "messaging_mean_ms",
                    "late_send_mean_ms",
                    "late_send_p99_ms",
                )
            }
        )
    files = _plot(loads, params, run_dir)
    return Report(
        ok=not failures,
        tables=[
            Table(
                f"Latency vs load, {params.service} service, S = {params.service_ms} ms ({model} is the model)",
                latency,
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
                tails,
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
                little,
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
            Table(
                "Where the time goes (ms, means)",
                where,
                {
                    "load": "load",
                    "demand_mean_ms": "service asked",
                    "delivered_mean_ms": "delivered",
                    "overshoot_mean_ms": "service error",
                    "overhead_mean_ms": "measured - replay",
                    "replay_delivered_mean_ms": "replay (delivered)",
                    "messaging_mean_ms": "measured - replay (delivered)",
                    "late_send_mean_ms": "send late",
                    "late_send_p99_ms": "send late p99",
                },
            ),
        ],
        notes=_notes(loads, params),
        failures=failures,
        data={"loads": loads},
        files=files,
    )


def _notes(loads: list[dict], p: Params) -> list[str]:
    worst = max(loads, key=lambda r: abs(_dev(r["mean_ms"], r["model_mean_ms"])))
    notes = [
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
        f"{_dev(worst['mean_ms'], worst['model_mean_ms']):+.0f}% (replay {worst['replay_mean_ms']:.1f} ms, "
        f"effective load {worst['eff_load']:.3f}; '-' in the @eff column when it is >= 0.99).",
        "Where the time goes: service error = delivered - asked (late wake-ups when the 2 shared cores are busy; "
        "with compensate=true the next services pay it back); replay (delivered) uses the service times the "
        "server really gave, so measured - replay (delivered) is the ZeroMQ hops and the client's own delays.",
    ]
    notes.append(
        "Little: L is the time-average of N(t) integrated from the send/reply stamps over the arrival window "
        "(first measured send to last send). Over a window that starts and ends empty L = lambda W holds by "
        "construction; here the requests cut at the window's edges make the two differ by about W / window, "
        "which shrinks as the run gets longer."
    )
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
        notes.append(
            f"At load {r['load']} the queue's relaxation time is about S/(1-rho)^2 = {relax_s:.1f} s and the "
            f"run lasts {span_s:.1f} s ({p.num_requests} requests), {noisy} (the lecture used 200,000 per load; "
            "--set params.num_requests=20000 goes longer)."
        )
    notes.append(machine_note())
    notes.append(
        "Timestamps are CLOCK_MONOTONIC on one host (1 ns resolution, sleep wake-ups ~0.05-0.2 ms late, "
        "more when the 2 shared cores are busy); the server runs on one core, client + receiver on the other."
    )
    return notes


def _plot(loads: list[dict], p: Params, run_dir) -> list[str]:
    s = p.service_ms / 1000
    rho = np.linspace(0.01, max(0.97, max(r["load"] for r in loads)), 200)
    with figure(run_dir / "latency_vs_load.png", (7, 4.5)) as (_, ax):
        ax.plot(rho, [1000 * qm.mm1_mean_sojourn_s(s, x) for x in rho], "C0-", label="M/M/1 mean")
        ax.plot(rho, [1000 * qm.md1_mean_sojourn_s(s, x) for x in rho], "C1-", label="M/D/1 mean")
        q99 = qm.mm1_sojourn_quantile_s if p.service == "exponential" else qm.md1_sojourn_quantile_s
        grid99 = np.append(rho[::10], rho[-1])
        ax.plot(
            grid99,
            [1000 * q99(s, x, 0.99) for x in grid99],
            "C2--",
            label=f"{'M/M/1' if p.service == 'exponential' else 'M/D/1'} p99",
        )
        x = [r["load"] for r in loads]
        ax.plot(x, [r["mean_ms"] for r in loads], "ko", label="measured mean")
        ax.plot(x, [r["p99_ms"] for r in loads], "k^", label="measured p99")
        ax.plot(x, [r["replay_mean_ms"] for r in loads], "rx", label="replay mean (same samples)")
        ax.set_yscale("log")
        ax.set_xlabel("load rho")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"Single server, {p.service} service, S = {p.service_ms} ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return ["latency_vs_load.png"]
