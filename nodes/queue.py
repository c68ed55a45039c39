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

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zmq

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.queueing import queue_report
from playground.queueing.batchserver import serve_client
from playground.queueing.loadgen import (
    STOP,
    OpenLoopClient,
    poisson_arrivals_s,
    run_server_and_client,
    service_times_s,
)
from playground.queueing.queue_stats import load_stats


@dataclass(frozen=True)
class Params:
    loads: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 0.95)  # server utilisations rho (0-1), one run each
    service_ms: float = 5.0  # mean service time S, ms; arrivals come at rate rho / S
    # exponential: each request's service time drawn with mean S (M/M/1); fixed: every one S (M/D/1)
    service: Literal["exponential", "fixed"] = "exponential"
    num_requests: int = 600  # requests sent per load, at Poisson times
    warmup_requests: int = 30  # per load, sent but left out of the latency statistics
    spin_tail_ms: float = 0.3  # the server spins this last part of each service instead of sleeping
    compensate: bool = True  # pay back late wake-ups on the next service, so the mean load is as asked
    exact_load: bool = True  # rescale sampled gaps and demands so this run's realised load is exactly rho
    seed: int = 1  # seed of the arrival times and service times

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


def main(comm, params: Params) -> dict:
    return run_server_and_client(comm, params, _serve, _load)


def _serve(comm, ctx: zmq.Context, p: Params) -> dict:
    total = len(p.loads) * p.num_requests

    def progress(served: int, load_id: int) -> None:
        if served % 50 == 0 or served == total:
            comm.progress(served, total, "requests served")

    return serve_client(
        comm,
        ctx,
        cost_s=lambda batch: batch[0][2],  # the request carries its service demand
        max_batch_of=lambda item: 1,
        spin_tail_s=p.spin_tail_ms / 1000,
        on_served=progress,
        compensate=p.compensate,
    )


def _load(comm, ctx: zmq.Context, p: Params) -> dict:
    n = p.num_requests
    client = OpenLoopClient(ctx, capacity=len(p.loads) * n)
    addresses = comm.allgather_obj(client.reply_address)
    client.connect(addresses[0])
    rng = np.random.default_rng(p.seed)
    service_s = p.service_ms / 1000
    rows = []
    raw: dict[str, Any] = {}  # name -> the load's requests' stamps, for np.savez
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


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return queue_report.report(results[1]["loads"], params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    ranks=Ranks(2, "queue runs one server and one client"),
    threaded=True,  # threads beside the rank's own (server, load generator)
)
