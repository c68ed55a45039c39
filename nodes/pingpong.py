"""Ping-pong between ranks 0 and 1: our communicator beside raw pyzmq on the same transport.

Lecture section 5.1: a message of n bytes takes T(n) = alpha + n/beta. For each size we time
(a) ping-pong: half the median round trip is the one-way time, and (b) streaming: `window`
messages back to back, then one acknowledgement, for bandwidth. Each is done twice, through
`comm.send/recv` and through bare pyzmq PUSH/PULL sockets with the same zero-copy settings, so
the ratio is the framework's own overhead (with --transport shm, what bypassing ZeroMQ gains).
alpha and beta are fitted to our one-way times. (The models' calibration, one file for every
model column and the simulator, is `python -m playground calibrate`'s: it runs this same exchange
on every pair of ranks at once, at 2 ranks and with more ranks than cores.)

How many: as the OSU micro-benchmarks run fewer iterations of large messages, the sizes share a
time budget, `budget_s` (3 s) per size: each size gets an even part of what is left of
`budget_s * len(sizes)`, so what the fast sizes leave over goes to the slow ones. One probe round
trip times each size, and rank 0 tells rank 1 the most exchanges that fit, at most `iters` round
trips (and `warmup`, `window`). On a fast link that is `iters` at every size; on a slow one fewer,
down to a minimum (the probe, 3 timed round trips, so that the median shrugs off one hiccup, and
one streamed message, each for ours and raw: about 8 round trips), the one thing that may overrun
the budget: a 4 MiB round trip takes 0.7 s at 100mbit. `budget_s: null` runs exactly `iters` (and
`warmup`, `window`) at every size.
"""

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.core.sizes import Size, format_size
from playground.display.report import Report
from playground.network import pingpong_report
from playground.network.raw_pair import RawPair

TAG = 9
TAG_COUNTS = 10


@dataclass(frozen=True)
class Params:
    # message bytes; each size is ping-ponged and streamed, through ours and through raw pyzmq
    sizes: tuple[Size, ...] = (64, 4096, 65536, 1 << 20, 4 << 20)
    # timed round trips per size and path, at most (see budget_s; one-way = half their median);
    # streaming keeps the best of max(3, iters / 5) rounds
    iters: int = 50
    warmup: int = 5  # untimed round trips before them
    window: int = 8  # messages in flight when streaming
    # seconds per size for all its exchanges: slow sizes run fewer round trips (at least 3); null:
    # exactly iters, warmup and window at every size
    budget_s: float | None = 3.0
    # The raw pyzmq pair measured beside ours: "auto" is tcp when ours is (or the ranks are on two
    # emulated hosts), else ipc.
    raw_transport: Literal["auto", "ipc", "tcp"] = "auto"
    # One trace event per message sent and waited for (what `inspect` splits time by); `bench p2p`
    # turns them off, as `bench allreduce` does: the raw pyzmq beside it logs nothing either.
    trace_messages: bool = True

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1:
            raise ParamError("sizes", "give at least one size >= 1 byte")
        for key, least in (("iters", 1), ("warmup", 0), ("window", 1)):
            if getattr(self, key) < least:
                raise ParamError(key, "iters and window must be >= 1, warmup >= 0")
        if self.budget_s is not None and not self.budget_s > 0:
            raise ParamError(
                "budget_s", f"must be > 0 seconds per size, or null for fixed counts, got {self.budget_s}"
            )


@dataclass(frozen=True)
class Counts:
    """One size's exchanges, the same for ours and raw: round trips (warm-up, timed), streamed
    bursts of `window` messages (the best burst counts)."""

    warmup: int
    iters: int
    window: int
    bursts: int


MIN_ITERS = 3  # timed round trips a size always gets (if iters allows): a median of 3 drops one hiccup


def counts_within(budget_s: float | None, round_trip_s: float, params: Params) -> Counts:
    """The most exchanges of one size that fit `budget_s` after its probe round trip, at most the
    params' counts: half for ours, half for raw, each first its ping-pong (up to half of that),
    then streaming in what is left, a streamed message costing about half a round trip; never
    fewer than MIN_ITERS timed round trips (or `iters`) and one streamed message."""
    most = Counts(params.warmup, params.iters, params.window, max(3, params.iters // 5))
    if budget_s is None:
        return most
    rt = max(round_trip_s, 1e-9)
    each_s = max(0.0, budget_s - round_trip_s) / 2  # ours, raw
    trips = int(each_s / 2 / rt)
    warmup = min(most.warmup, trips // 10)
    iters = min(most.iters, max(MIN_ITERS, trips - warmup))
    messages = int((each_s - (warmup + iters) * rt) / (rt / 2))  # what is left, for streaming
    window = max(1, min(most.window, messages // 3))
    return Counts(warmup, iters, window, max(1, min(most.bursts, messages // window)))


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < 2:
        raise ParamError("ranks", "ping-pong needs at least 2 ranks")


def _pingpong(rank: int, send, recv, buf, out, iters: int, warmup: int) -> float:
    rtts = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        if rank == 0:
            send(buf)
            recv(out)
        else:
            recv(out)
            send(out)
        if i >= warmup:
            rtts.append(time.perf_counter() - t0)
    return float(np.median(rtts)) / 2


def _counts(comm, peer: int, send, recv, buf, out, params: Params, budget_s: float | None) -> Counts:
    """Time one round trip of this size (it warms the path too) and agree on its counts."""
    t0 = time.perf_counter()
    if comm.rank == 0:
        send(buf)
        recv(out)
        counts = counts_within(budget_s, time.perf_counter() - t0, params)
        comm.send_obj([counts.warmup, counts.iters, counts.window, counts.bursts], peer, TAG_COUNTS)
        return counts
    recv(out)
    send(out)
    return Counts(*comm.recv_obj(peer, TAG_COUNTS))


def _stream(rank: int, send, recv, buf, out, ack, window: int, bursts: int) -> float:
    best = float("inf")
    for _ in range(bursts):
        t0 = time.perf_counter()
        if rank == 0:
            for _ in range(window):
                send(buf)
            recv(ack)
        else:
            for _ in range(window):
                recv(out)
            send(ack)
        best = min(best, time.perf_counter() - t0)
    return window * buf.nbytes / best / 1e9


def main(comm, params: Params) -> dict:
    if comm.rank > 1:
        return {"rows": []}
    comm.tracer.messages = comm.tracer.messages and params.trace_messages
    across_hosts = bool(comm.hosts) and comm.hosts[0] != comm.hosts[1]  # emulated hosts: tcp between them
    auto = "tcp" if comm.transport.name == "tcp" or across_hosts else "ipc"
    raw = RawPair(comm, auto if params.raw_transport == "auto" else params.raw_transport)
    peer = 1 - comm.rank
    ours_send = lambda b: comm.send(b, peer, TAG)  # noqa: E731
    ours_recv = lambda o: comm.recv(peer, TAG, out=o)  # noqa: E731
    ack = np.zeros(1, dtype=np.uint8)
    rows, t_start = [], time.perf_counter()
    try:
        for k, n in enumerate(params.sizes):
            comm.progress(k, len(params.sizes), format_size(n))
            buf, out = np.ones(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
            left_s = None  # an even part of what is left of the run's budget
            if params.budget_s is not None:
                run_left_s = params.budget_s * len(params.sizes) - (time.perf_counter() - t_start)
                left_s = run_left_s / (len(params.sizes) - k)
            c = _counts(comm, peer, ours_send, ours_recv, buf, out, params, left_s)
            row: dict[str, float] = {"size": n, "iters": c.iters, "window": c.window, "bursts": c.bursts}
            for name, send, recv in (("ours", ours_send, ours_recv), ("raw", raw.send, raw.recv)):
                with comm.tracer.span(f"pingpong.{name}", cat="op", bytes=n):
                    row[f"{name}_oneway_us"] = (
                        _pingpong(comm.rank, send, recv, buf, out, c.iters, c.warmup) * 1e6
                    )
                with comm.tracer.span(f"stream.{name}", cat="op", bytes=n):
                    row[f"{name}_stream_gbps"] = _stream(
                        comm.rank, send, recv, buf, out, ack, c.window, c.bursts
                    )
            comm.tracer.flush()
            rows.append(row)
    finally:
        raw.close()
    elapsed_s = time.perf_counter() - t_start
    if comm.transport.name == "shm":
        path = "shared memory"
    elif getattr(comm.transport, "channels", None) is not None:
        path = "ZeroMQ + rings"  # ipc: arrays from 64 KiB go through shared-memory rings
    else:
        path = "ZeroMQ"
    budget = {"budget_s": params.budget_s, "elapsed_s": elapsed_s}
    budget |= {"iters": params.iters, "min_iters": min(MIN_ITERS, params.iters)}
    return {"rows": rows, "ours_path": path, **budget}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return pingpong_report.report(results, run_dir)


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
