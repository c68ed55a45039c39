"""Ping-pong between ranks 0 and 1: our communicator beside raw pyzmq on the same transport.

Lecture section 5.1: a message of n bytes takes T(n) = alpha + n/beta. For each size we time
(a) ping-pong: half the median round trip is the one-way time, and (b) streaming: `window`
messages back to back, then one acknowledgement, for bandwidth. Each is done twice, through
`comm.send/recv` and through bare pyzmq PUSH/PULL sockets with the same zero-copy settings, so
the ratio is the framework's own overhead (with --transport shm, what bypassing ZeroMQ gains).
alpha and beta are fitted to our one-way times.
"""

import os
import time
from dataclasses import dataclass

import numpy as np
import zmq

from playground.errors import CommTimeout
from playground.models.alphabeta import fit_alpha_beta
from playground.rendezvous import local_ip_towards
from playground.report import Report, Table
from playground.sizes import Size, format_size

TAG = 9


@dataclass(frozen=True)
class Params:
    sizes: tuple[Size, ...] = (64, 4096, 65536, 1 << 20, 4 << 20)
    iters: int = 50
    warmup: int = 5
    window: int = 8  # messages in flight when streaming

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError("sizes: give at least one size >= 1 byte")
        if self.iters < 1 or self.warmup < 0 or self.window < 1:
            raise ValueError("iters: iters and window must be >= 1, warmup >= 0")


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < 2:
        raise ValueError("key 'ranks': ping-pong needs at least 2 ranks")


class RawPair:
    """Bare pyzmq PUSH/PULL between two ranks: the yardstick for our per-message overhead."""

    def __init__(self, comm, transport: str):
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.pull.setsockopt(zmq.RCVTIMEO, int(comm.timeout_s * 1000))  # every blocking receive has a timeout
        self.peer = 1 - comm.rank
        if transport == "tcp":  # on the address other hosts reach us at (127.0.0.1 on one host)
            self.pull.bind(f"tcp://{local_ip_towards(os.environ.get('MASTER_ADDR', '127.0.0.1'))}:*")
            endpoint = self.pull.getsockopt(zmq.LAST_ENDPOINT).decode()
        else:
            endpoint = f"ipc://{comm.run_dir.resolve()}/raw-{comm.rank}-{os.getpid()}.sock"
            if len(endpoint) > 100:
                endpoint = f"ipc:///tmp/playground-raw-{comm.rank}-{os.getpid()}.sock"
            self.pull.bind(endpoint)
        peer_endpoint = comm.allgather_obj(endpoint)[1 - comm.rank]
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 0)
        self.push.connect(peer_endpoint)
        self.endpoint = endpoint

    def send(self, buf: np.ndarray) -> None:
        if buf.nbytes >= 65536:
            self.push.send(buf, copy=False, track=True).wait()
        else:
            self.push.send(buf)

    def recv(self, out: np.ndarray) -> None:
        try:
            frame = self.pull.recv(copy=False)
        except zmq.Again:
            raise CommTimeout(
                1 - self.peer, "raw pyzmq recv", self.peer, None, self.pull.getsockopt(zmq.RCVTIMEO) / 1000
            ) from None
        out[:] = np.frombuffer(frame.buffer, dtype=out.dtype)

    def close(self):
        self.push.close(linger=0)
        self.pull.close(linger=0)
        self.ctx.term()
        if self.endpoint.startswith("ipc://"):
            try:
                os.unlink(self.endpoint[len("ipc://") :])
            except OSError:
                pass


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
    return {"rows": rows, "ours_path": "shared memory + pipes" if comm.transport.name == "shm" else "ZeroMQ"}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    rows = []
    for r in results[0]["rows"]:
        rows.append(
            {
                "size": r["size"],
                "ours_us": r["ours_oneway_us"],
                "raw_us": r["raw_oneway_us"],
                "lat_ratio": r["ours_oneway_us"] / r["raw_oneway_us"],
                "ours_gbps": r["ours_stream_gbps"],
                "raw_gbps": r["raw_stream_gbps"],
                "bw_ratio": r["raw_stream_gbps"] / r["ours_stream_gbps"],
            }
        )
    notes = []
    if len(rows) >= 2:
        try:
            fit = fit_alpha_beta([r["size"] for r in rows], [r["ours_us"] * 1e-6 for r in rows])
            notes.append(
                f"alpha-beta fit to our one-way times: alpha = {fit.alpha_s * 1e6:.1f} us, "
                f"beta = {fit.beta_bytes_per_s / 1e9:.2f} GB/s, half-bandwidth size n1/2 = "
                f"{format_size(int(fit.alpha_s * fit.beta_bytes_per_s))}"
            )
            for r in rows:
                r["model_us"] = (fit.alpha_s + r["size"] / fit.beta_bytes_per_s) * 1e6
        except ValueError as e:
            notes.append(f"no alpha-beta fit: {e}")
    cols = {
        "size": "size (B)",
        "ours_us": "ours one-way (us)",
        "raw_us": "raw pyzmq (us)",
        "lat_ratio": "ours/raw",
        "model_us": "alpha+n/beta (us)",
        "ours_gbps": "ours stream (GB/s)",
        "raw_gbps": "raw stream (GB/s)",
        "bw_ratio": "raw/ours",
    }
    if results[0].get("ours_path", "ZeroMQ") == "ZeroMQ":
        notes.append(
            "ratios > 1 are the framework's overhead over bare pyzmq on the same transport and socket types"
        )
    else:
        notes.append(
            "ours went through shared memory and per-rank pipes (--transport shm), raw pyzmq over ipc: "
            "ratios < 1 are what bypassing ZeroMQ on one host gains"
        )
    return Report(
        ok=True,
        tables=[Table(f"point-to-point, rank 0 <-> rank 1 ({len(results)} ranks)", rows, cols)],
        notes=notes,
    )
