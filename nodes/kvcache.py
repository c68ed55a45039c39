"""Paged KV-cache server and its clients (lecture 4.3-4.6, exercises 9 and 10).

Rank 0 runs the server on its own ZeroMQ ROUTER socket (a thread, so the main thread stays
free for the communicator and the progress bar) speaking the protocol of docs/protocols.md;
ranks 1..N-1 are clients on DEALER sockets. For each policy in `policies` the server starts
empty, the clients replay the workload, and report their timings to rank 0 over the
communicator. Workloads: `section46` (1000 requests, capacity 200,000 tokens), `prefix`
(section 4.5: 100-token prefix, 4 branches of 10), `ex10` (1000-token prompt, 8 samples of
200), `bench` (throughput and latency with every client in a closed loop).
"""

import time
from dataclasses import dataclass
from typing import Literal

from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.kvcache.engine.policies import POLICIES, PolicyName, check_pool_params
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.thread import TAG_RESULT, collect_results, rank_client, start_server_thread
from playground.kvcache.stats import downsample
from playground.kvlab import kvcache_report, replay


@dataclass(frozen=True)
class Params:
    # section46 (lecture 4.6): num_requests requests shared by the clients, each replaying its share
    # with a vLLM-like scheduler; prefix (4.5: 100-token prompt, 4 samples of 10) and ex10 (exercise
    # 10: 1000-token prompt, 8 samples of 200): one client holds the samples unshared, then forked
    # (then prefix-cached, with prefix_caching); bench: every client grows bench_seqs sequences in a
    # closed loop, for ops/s and latency
    workload: Literal["section46", "prefix", "ex10", "bench"] = "section46"
    policies: tuple[PolicyName, ...] = tuple(POLICIES)  # allocation policies, run in turn on an empty server
    capacity_tokens: int = 200_000  # the KV pool in token slots, the same for every policy
    block_size: int = 16  # tokens per block of the paged policy (the others report sizes in blocks of it)
    width: int = 8  # KV values (float32) per token
    num_requests: int = 1000  # section46: requests in all, dealt to the clients in turn
    prompt_min: int = 50  # section46: shortest prompt, tokens (lengths uniform up to prompt_max)
    prompt_max: int = 499  # section46: longest prompt, tokens
    output_mean: float = 200.0  # section46: mean output length, tokens (geometric: a long tail)
    output_cap: int = 2048  # section46: output lengths cut at this many tokens
    max_new_tokens: int = 2048  # reserve_max reserves prompt + this at admission
    decode_tokens_per_step: int = 1  # section46: tokens appended to every running sequence per step
    max_running: int = 256  # section46: running sequences per client at most (vLLM's max_num_seqs)
    admit_watermark: float = 0.01  # section46: admit only while this fraction of capacity stays free
    max_wait_s: float = 20.0  # section46: a request refused for this many seconds fails
    growth: float = 1.5  # contiguous: a moved run reserves growth x its length
    # paged: share full prompt blocks between sequences created with the same tokens; prefix and ex10
    # then also measure the samples created that way (prefix_cache). section46 sends no tokens
    prefix_caching: bool = False
    lease_s: float = 30.0  # the server frees every sequence of a client silent this many seconds
    verify_every: int = 1  # section46: read back and check every k-th finished request (0: none)
    check_invariants: bool = False  # the server checks its allocator after every change (slow; for tests)
    bench_duration_s: float = 2.0  # bench: seconds each client runs its loop, per policy
    bench_seqs: int = 32  # bench: sequences each client grows at once, one batched append a step
    bench_prompt_tokens: int = 128  # bench: prompt of each new sequence, tokens
    bench_max_len: int = 384  # bench: a sequence this long is read back, checked, freed and replaced
    # where the server listens: tcp (a 127.0.0.1 port) or ipc (a Unix socket in the run directory)
    endpoint: Literal["tcp", "ipc"] = "tcp"
    seed: int = 0  # section46: seed of the prompt and output lengths

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
        check_pool_params(self)
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


def main(comm, params: Params) -> dict:
    if comm.rank == 0:
        return _serve(comm, params)
    return _client(comm, params)


def _serve(comm, p: Params) -> dict:
    thread = start_server_thread(comm, p.endpoint, new_server(p, p.policies[0]), "kvcache")
    per_policy = []
    try:
        for policy in p.policies:
            thread.server = srv = new_server(p, policy)
            comm.barrier()
            t0 = time.monotonic()
            clients = collect_results(comm, srv, p, policy, thread)
            elapsed_s = time.monotonic() - t0
            per_policy.append(
                {
                    "policy": policy,
                    "elapsed_s": elapsed_s,
                    "stats": srv.stats(),
                    "samples": downsample(srv.samples),
                    "clients": clients,
                }
            )
    finally:
        thread.stopping.set()
        thread.join(5)
    return {"ok": True, "address": thread.address, "policies": per_policy}


def new_server(p: Params, policy: str) -> KVServer:
    """An empty server for `policy`, sized and configured by the scenario's params."""
    return KVServer(
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


def _client(comm, p: Params) -> dict:
    address = comm.bcast_obj(None)
    client = rank_client(comm, address)
    try:
        client.ping()
        for _policy in p.policies:  # the server switches policy between barriers
            comm.barrier()
            client.latencies_us.clear()
            t0 = time.monotonic()
            result = replay.run_workload(comm, client, p)
            result["elapsed_s"] = time.monotonic() - t0
            result["latencies_us"] = {op: [round(v, 1) for v in vs] for op, vs in client.latencies_us.items()}
            comm.send_obj(result, 0, TAG_RESULT)
    finally:
        client.close()
    return {"ok": True}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return kvcache_report.report(results[0]["policies"], params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # threads beside the rank's own (server, load generator)
)
