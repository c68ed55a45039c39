"""Paged KV-cache server and its clients (lecture 4.3-4.6, exercises 9 and 10).

Rank 0 runs the server on its own ZeroMQ ROUTER socket (a thread, so the main thread stays
free for the communicator and the progress bar) speaking the protocol of docs/kvcache.md;
ranks 1..N-1 are clients on DEALER sockets. For each policy in `policies` the server starts
empty, the clients replay the workload, and report their timings to rank 0 over the
communicator. Workloads: `section46` (1000 requests, capacity 200,000 tokens), `prefix`
(section 4.5: 100-token prefix, 4 branches of 10), `ex10` (1000-token prompt, 8 samples of
200), `bench` (throughput and latency with every client in a closed loop).
"""

import threading
import time
from dataclasses import dataclass
from typing import Literal

import zmq

from playground.errors import CommTimeout, ParamError
from playground.kvcache import engine, metrics
from playground.kvcache.client import KVClient
from playground.kvcache.report import summarize  # noqa: F401  (the launcher looks for it here)
from playground.kvcache.server import Server, serve
from playground.kvcache.workloads import EXERCISE10, SECTION45, ForkSpec, section46_requests

TAG_RESULT = 41
Policy = Literal["paged", "contiguous", "reserve_max"]


@dataclass(frozen=True)
class Params:
    workload: Literal["section46", "prefix", "ex10", "bench"] = "section46"
    policies: tuple[Policy, ...] = ("paged", "contiguous", "reserve_max")
    capacity_tokens: int = 200_000
    block_size: int = 16
    width: int = 8  # KV floats per token
    num_requests: int = 1000
    prompt_min: int = 50
    prompt_max: int = 499
    output_mean: float = 200.0
    output_cap: int = 2048
    max_new_tokens: int = 2048  # reserve_max reserves prompt + this
    decode_tokens_per_step: int = 1
    max_running: int = 256  # per client, like vLLM's max_num_seqs
    admit_watermark: float = 0.01  # admit only while this fraction of capacity stays free
    max_wait_s: float = 20.0  # a request refused this long fails
    growth: float = 1.5  # contiguous: a moved run reserves growth x its length
    prefix_caching: bool = False
    lease_s: float = 30.0
    verify_every: int = 1  # read back and check every k-th finished request (0: none)
    check_invariants: bool = False  # after every mutating op (slow; for tests)
    bench_duration_s: float = 2.0
    bench_seqs: int = 32  # per client
    bench_prompt_tokens: int = 128
    bench_max_len: int = 384
    endpoint: Literal["tcp", "ipc"] = "tcp"
    seed: int = 0

    def __post_init__(self):
        for name in (
            "capacity_tokens",
            "block_size",
            "width",
            "num_requests",
            "prompt_min",
            "output_cap",
            "decode_tokens_per_step",
            "max_running",
            "bench_seqs",
            "bench_prompt_tokens",
        ):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        if not self.policies or len(set(self.policies)) != len(self.policies):
            raise ParamError("policies", f"a non-empty list without repeats, got {list(self.policies)}")
        if self.prompt_max < self.prompt_min:
            raise ParamError(
                "prompt_max", f"must be >= prompt_min ({self.prompt_min}), got {self.prompt_max}"
            )
        if self.block_size > self.capacity_tokens:
            raise ParamError("block_size", f"must be <= capacity_tokens, got {self.block_size}")
        if not 0 <= self.admit_watermark < 1:
            raise ParamError("admit_watermark", f"must be in [0, 1), got {self.admit_watermark}")
        if self.growth < 1:
            raise ParamError("growth", f"must be >= 1, got {self.growth}")
        if self.bench_max_len <= self.bench_prompt_tokens:
            raise ParamError("bench_max_len", f"must be > bench_prompt_tokens, got {self.bench_max_len}")
        for name in ("output_mean", "max_wait_s", "lease_s", "bench_duration_s"):
            if getattr(self, name) <= 0:
                raise ParamError(name, f"must be > 0, got {getattr(self, name)}")


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < 2:
        raise ParamError("ranks", f"kvcache needs one server and at least one client (>= 2), got {ranks}")


def _fork_spec(p: Params) -> ForkSpec:
    return SECTION45 if p.workload == "prefix" else EXERCISE10


class _ServerThread(threading.Thread):
    """Owns the ROUTER socket (created in this thread); `server` is swapped between policies
    only while every client waits at a barrier."""

    def __init__(self, bind: str):
        super().__init__(name="kvcache-server", daemon=True)
        self.bind, self.server, self.address, self.error = bind, None, None, None
        self.ready, self.stopping = threading.Event(), threading.Event()

    def handle(self, client, frames):
        return self.server.handle(client, frames)

    def expire_leases(self):
        return self.server.expire_leases()

    @property
    def errors(self):
        return self.server.errors

    def run(self):
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.linger = 0
        try:
            sock.bind(self.bind)
            self.address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self.ready.set()
            serve(self, sock, stop=self.stopping.is_set)
        except Exception as e:  # reported by the main thread
            self.error = f"{type(e).__name__}: {e}"
            self.ready.set()
        finally:
            sock.close(0)
            ctx.term()


def main(comm, params: Params) -> dict:
    if comm.rank == 0:
        return _serve(comm, params)
    return _client(comm, params)


def _serve(comm, p: Params) -> dict:
    bind = "tcp://127.0.0.1:*" if p.endpoint == "tcp" else f"ipc://{comm.run_dir}/kvcache.sock"
    thread = _ServerThread(bind)
    thread.server = _new_server(p, p.policies[0])
    thread.start()
    if not thread.ready.wait(comm.timeout_s) or thread.error:
        raise RuntimeError(f"kvcache server did not start on {bind}: {thread.error or 'timed out'}")
    comm.bcast_obj(thread.address)
    per_policy = []
    try:
        for policy in p.policies:
            thread.server = srv = _new_server(p, policy)
            comm.barrier()
            t0 = time.monotonic()
            clients = _collect(comm, srv, p, policy, thread)
            elapsed_s = time.monotonic() - t0
            per_policy.append(
                {
                    "policy": policy,
                    "elapsed_s": elapsed_s,
                    "stats": srv.stats(),
                    "samples": metrics.downsample(srv.samples),
                    "clients": clients,
                }
            )
    finally:
        thread.stopping.set()
        thread.join(5)
    return {"ok": True, "address": thread.address, "policies": per_policy}


def _new_server(p: Params, policy: str) -> Server:
    return Server(
        policy,
        p.capacity_tokens,
        p.block_size,
        p.width,
        p.lease_s,
        p.prefix_caching,
        p.max_new_tokens,
        p.growth,
        check_invariants=p.check_invariants,
    )


def _collect(comm, srv: Server, p: Params, policy: str, thread: _ServerThread) -> dict:
    """Wait for every client's result, driving the progress bar; fail if the server goes idle
    for longer than the scenario's timeout (a stuck run becomes an error, not a hang)."""
    out, pending = {}, set(range(1, comm.size))
    last_ops, last_change = srv.num_ops, time.monotonic()
    total = p.num_requests if p.workload == "section46" else 1
    while pending:
        for src in sorted(pending):
            try:
                out[src] = comm.recv_obj(src, TAG_RESULT, timeout_s=0.1)
                pending.discard(src)
            except CommTimeout:
                pass
        if thread.error:
            raise RuntimeError(f"kvcache server thread failed: {thread.error}")
        if srv.num_ops != last_ops:
            last_ops, last_change = srv.num_ops, time.monotonic()
        elif time.monotonic() - last_change > comm.timeout_s:
            raise CommTimeout(
                0,
                f"kvcache results ({policy}; no request reached the server)",
                min(pending),
                TAG_RESULT,
                comm.timeout_s,
            )
        if p.workload == "section46":
            comm.progress(min(srv.num_freed_seqs, total), total, f"kvcache {policy}")
    return {str(k): v for k, v in sorted(out.items())}


def _client(comm, p: Params) -> dict:
    address = comm.bcast_obj(None)
    client = KVClient(address, timeout_s=comm.timeout_s)
    try:
        client.ping()
        for _policy in p.policies:  # the server switches policy between barriers
            comm.barrier()
            client.latencies_us.clear()
            t0 = time.monotonic()
            result = _run_workload(comm, client, p)
            result["elapsed_s"] = time.monotonic() - t0
            result["latencies_us"] = {op: [round(v, 1) for v in vs] for op, vs in client.latencies_us.items()}
            comm.send_obj(result, 0, TAG_RESULT)
    finally:
        client.close()
    return {"ok": True}


def _run_workload(comm, client: KVClient, p: Params) -> dict:
    if p.workload == "section46":
        reqs = section46_requests(
            p.num_requests, p.prompt_min, p.prompt_max, p.output_mean, p.output_cap, p.seed
        )
        mine = reqs[comm.rank - 1 :: comm.size - 1]
        watermark = int(p.admit_watermark * p.capacity_tokens)
        st = engine.replay(
            client,
            mine,
            p.width,
            p.max_running,
            p.decode_tokens_per_step,
            p.max_wait_s,
            watermark,
            p.verify_every,
        )
        return {
            "requests": len(mine),
            "completed": st.completed,
            "waited": st.waited,
            "failed": st.failed,
            "preempted": st.preempted,
            "read_mismatches": st.read_mismatches,
            "errors": st.errors[:5],
        }
    if p.workload == "bench":
        return engine.run_bench(
            client,
            p.width,
            p.bench_duration_s,
            p.bench_seqs,
            p.bench_prompt_tokens,
            p.bench_max_len,
            key_base=comm.rank * 10_000_000,
        )
    if comm.rank != 1:
        return {"idle": True}
    return {"fork_rows": engine.run_fork_workload(client, _fork_spec(p), p.width, p.prefix_caching)}
