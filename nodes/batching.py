"""A batching server under open-loop load: a little latency buys several times the throughput
(lecture 2.4).

Rank 0 serves: whenever it is free it takes *everything queued* (up to max_batch) as one batch
costing fixed + per_item x batch (the lecture's 20 ms + 1 ms x b, times `time_scale`), then
replies to every request of the batch. Rank 1 sends open-loop Poisson streams at each offered
rate for `duration_s`, first one request at a time (max_batch 1), then batched. The model beside
each row: capacity 1 / (fixed + per_item) = 48/s against max_batch / (fixed + per_item x
max_batch) = 615/s; throughput min(offered, capacity); the fluid batch size; and a replay of the
ideal batching server on the run's own arrivals. Past capacity the queue grows without bound: the
client stops after `drain_s` and the server drops the backlog (counted), so runs stay short.
"""

import time
from dataclasses import dataclass

import numpy as np
import zmq

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.models import queueing as qm
from playground.queueing import batching_report
from playground.queueing.batching_stats import rate_stats
from playground.queueing.batchserver import serve_client
from playground.queueing.loadgen import (
    ABORT,
    STOP,
    OpenLoopClient,
    run_server_and_client,
)


@dataclass(frozen=True)
class Params:
    # offered loads in requests/s at time_scale 1, each run one at a time, then batched
    rates_per_s: tuple[float, ...] = (20, 100, 300, 550, 800)
    fixed_ms: float = 20.0  # cost of every batch whatever its size, ms at time_scale 1 (the lecture's 20 ms)
    per_item_ms: float = 1.0  # cost added per request in the batch, ms at time_scale 1 (0: size is free)
    max_batch: int = 32  # most requests one batch takes; 1: only the one-at-a-time runs
    time_scale: float = 1.0  # costs x scale, rates / scale: same shape, shorter or longer runs
    duration_s: float = 1.5  # seconds of arrivals per rate and mode
    drain_s: float = 0.5  # wait this long for the backlog after the last send, then drop it
    spin_tail_ms: float = 0.3  # ms at the end of each service spun, not slept, to end on time (0: sleep only)
    seed: int = 2  # seed of the Poisson arrival times

    def __post_init__(self):
        if not self.rates_per_s or any(r <= 0 for r in self.rates_per_s):
            raise ParamError("rates_per_s", f"each must be > 0, got {list(self.rates_per_s)}")
        for name in ("fixed_ms", "time_scale", "duration_s"):
            if getattr(self, name) <= 0:
                raise ParamError(name, f"must be > 0, got {getattr(self, name)}")
        if self.per_item_ms < 0:
            raise ParamError("per_item_ms", f"must be >= 0, got {self.per_item_ms}")
        if self.drain_s < 0:
            raise ParamError("drain_s", f"must be >= 0, got {self.drain_s}")
        if self.max_batch < 1:
            raise ParamError("max_batch", f"must be >= 1, got {self.max_batch}")

    @property
    def fixed_s(self) -> float:
        return self.fixed_ms * self.time_scale / 1000

    @property
    def per_item_s(self) -> float:
        return self.per_item_ms * self.time_scale / 1000

    def modes(self) -> tuple[int, ...]:
        return (1, self.max_batch) if self.max_batch > 1 else (1,)


def main(comm, params: Params) -> dict:
    return run_server_and_client(comm, params, _serve, _load)


def _serve(comm, ctx: zmq.Context, p: Params) -> dict:
    num_loads = len(p.modes()) * len(p.rates_per_s)
    return serve_client(
        comm,
        ctx,
        cost_s=lambda batch: qm.batch_service_s(len(batch), p.fixed_s, p.per_item_s),
        max_batch_of=lambda item: int(item[2]),  # the request says which mode this load runs in
        spin_tail_s=p.spin_tail_ms / 1000,
        compensate=True,
        on_served=lambda served, load_id: comm.progress(load_id, num_loads, "offered loads"),
    )


def _load(comm, ctx: zmq.Context, p: Params) -> dict:
    rng = np.random.default_rng(p.seed)
    plan = []  # (mode, rate, arrival offsets)
    for mode in p.modes():
        for rate in p.rates_per_s:
            lam = rate / p.time_scale
            gaps = rng.exponential(1 / lam, int(lam * p.duration_s * 1.5) + 20)
            offsets = np.cumsum(gaps)
            plan.append((mode, lam, offsets[offsets < p.duration_s]))
    client = OpenLoopClient(ctx, capacity=sum(len(o) for _, _, o in plan))
    client.connect(comm.allgather_obj(client.reply_address)[0])
    rows, first, base = [], 0, 0  # first: id of the load's first request; base: replies before it
    try:
        for load_id, (mode, lam, offsets) in enumerate(plan):
            n = len(offsets)
            t0 = time.monotonic() + 0.02
            for i in range(n):
                client.send_at(t0 + offsets[i], first + i, load_id, float(mode))
            dropped = 0
            if not client.wait_received(
                base + n, p.drain_s + 4 * qm.batch_service_s(mode, p.fixed_s, p.per_item_s)
            ):
                client.send_control(ABORT, load_id)
                if not client.wait_ack(load_id, comm.timeout_s):
                    return {"ok": False, "error": f"no ABORT acknowledgement for load {load_id}"}
                dropped = base + n - client.received
            ids = slice(first, first + n)
            rows.append(
                rate_stats(
                    p.fixed_s,
                    p.per_item_s,
                    mode,
                    lam,
                    t0,
                    offsets,
                    client.t_send_s[ids],
                    client.t_recv_s[ids],
                    client.batch_size[ids],
                    dropped,
                )
            )
            first += n
            base = client.received
    finally:
        client.send_control(STOP, 0)
        client.close()
    return {"ok": True, "role": "client", "rows": rows}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return batching_report.report(results[1]["rows"], params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    ranks=Ranks(2, "batching runs one server and one client"),
    threaded=True,  # threads beside the rank's own (server, load generator)
)
