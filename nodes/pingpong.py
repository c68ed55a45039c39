"""Ping-pong between ranks 0 and 1: our communicator beside raw pyzmq on the same transport.

Lecture section 5.1: a message of n bytes takes T(n) = alpha + n/beta. For each size we time
(a) ping-pong: half the median round trip is the one-way time, and (b) streaming: `window`
messages back to back, then one acknowledgement, for bandwidth. Each is done twice, through
`comm.send/recv` and through bare pyzmq PUSH/PULL sockets with the same zero-copy settings, so
the ratio is the framework's own overhead (with --transport shm, what bypassing ZeroMQ gains).
alpha and beta are fitted to our one-way times; rank 0 also times the reduction (gamma) for
`dtype`, and all three go to the run's calibration.json (playground.models.calibration).
"""

import os
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.buckets import pingpong_report
from playground.buckets.raw_pair import RawPair
from playground.errors import ParamError
from playground.models.calibration import measure_gamma
from playground.report import Report
from playground.sizes import Size, format_size

TAG = 9


@dataclass(frozen=True)
class Params:
    sizes: tuple[Size, ...] = (64, 4096, 65536, 1 << 20, 4 << 20)
    iters: int = 50
    warmup: int = 5
    window: int = 8  # messages in flight when streaming
    dtype: Literal["float32", "float64", "int32", "int64"] = "float32"  # of the reduction gamma times
    # One trace event per message sent and waited for (what `inspect` splits time by); `bench p2p`
    # turns them off, as `bench allreduce` does: the raw pyzmq beside it logs nothing either.
    trace_messages: bool = True

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1:
            raise ParamError("sizes", "give at least one size >= 1 byte")
        if self.iters < 1 or self.warmup < 0 or self.window < 1:
            raise ParamError("iters", "iters and window must be >= 1, warmup >= 0")


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


def _stream(rank: int, send, recv, buf, out, ack, window: int, iters: int) -> float:
    best = float("inf")
    for _ in range(max(3, iters // 5)):
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
    raw = RawPair(
        comm,
        os.environ.get(
            "PLAYGROUND_TRANSPORT", "tcp" if comm.transport.name == "tcp" or across_hosts else "ipc"
        ),
    )
    peer = 1 - comm.rank
    ours_send = lambda b: comm.send(b, peer, TAG)  # noqa: E731
    ours_recv = lambda o: comm.recv(peer, TAG, out=o)  # noqa: E731
    ack = np.zeros(1, dtype=np.uint8)
    rows = []
    try:
        for k, n in enumerate(params.sizes):
            comm.progress(k, len(params.sizes), format_size(n))
            buf, out = np.ones(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
            row = {"size": n}
            for name, send, recv in (("ours", ours_send, ours_recv), ("raw", raw.send, raw.recv)):
                with comm.tracer.span(f"pingpong.{name}", cat="op", bytes=n):
                    row[f"{name}_oneway_us"] = (
                        _pingpong(comm.rank, send, recv, buf, out, params.iters, params.warmup) * 1e6
                    )
                with comm.tracer.span(f"stream.{name}", cat="op", bytes=n):
                    row[f"{name}_stream_gbps"] = _stream(
                        comm.rank, send, recv, buf, out, ack, params.window, params.iters
                    )
            comm.tracer.flush()
            rows.append(row)
    finally:
        raw.close()
    if comm.transport.name == "shm":
        path = "shared memory"
    elif getattr(comm.transport, "channels", None) is not None:
        path = "ZeroMQ + rings"  # ipc: arrays from 64 KiB go through shared-memory rings
    else:
        path = "ZeroMQ"
    return {"rows": rows, "ours_path": path, "gamma": measure_gamma(params.dtype) if comm.rank == 0 else None}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return pingpong_report.report(results, run_dir)
