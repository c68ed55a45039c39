"""A model served from the paged KV-cache pool, with continuous batching (docs/serving.md).

Rank 0 runs the KV-cache server with a model (the model.npz the last `run train` saved, one
given, or fixed random weights: playground/serving/served.py) on its own thread; its engine schedules every step (playground/kvcache/engine/). Ranks 1..N-1 are
clients sending `generate` requests over the documented protocol. For each setup (a policy, and
for the prefix workload prefix caching off and on) the server starts empty and the clients run
the workload: `section46` (the lecture's 4.6 requests under one KV budget), `samples` (exercise
10 with generated tokens), `prefix` (a shared system prompt), `batch` (decode steps of 1..64).
"""

import time
from dataclasses import dataclass
from typing import Literal

from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.kvcache.engine.attention import Kernel
from playground.kvcache.engine.policies import POLICIES, PolicyName, check_pool_params
from playground.kvcache.server.thread import TAG_RESULT, collect_results, rank_client, start_server_thread
from playground.kvcache.stats import downsample
from playground.serving import resume, served, serving_clients, serving_report, serving_stats, step_model
from playground.transformer.blas import pin_blas_threads


@dataclass(frozen=True)
class Params:
    workload: Literal["section46", "samples", "prefix", "batch"] = "section46"  # what the clients send
    policies: tuple[PolicyName, ...] = tuple(POLICIES)  # allocation policies, a fresh server each
    model: str | None = (
        None  # latest (the newest trained model.npz beside this run), a model.npz or its run dir; none: random
    )
    prompt: str | None = (
        None  # section46: one more request of your own text (UTF-8), `new_tokens` generated, shown first
    )
    show_texts: int = 3  # section46: the k longest requests return their text, shown beside the table
    layers: int = 2  # random model: transformer blocks
    d_model: int = 64  # random model: width
    heads: int = 4  # random model: attention heads (head_dim = d_model / heads)
    context: int = 2560  # random model: positions (a longer sequence recomputes its last `context`)
    model_seed: int = 0  # random model: the weights' seed (clients build the same model to check)
    width: int | None = None  # KV floats per token; if set, the model's layers x 2 x heads x head_dim
    capacity_tokens: int = 200_000  # the KV memory budget in tokens, the same for every policy
    block_size: int = 16  # tokens a block (paged); pages are counted in it
    prefix_caching: bool = False  # share cached full prompt blocks (paged; prefix workload: both)
    max_new_tokens: int = 2048  # reserve_max reserves prompt + this for every sequence
    max_num_seqs: int = 1024  # running sequences at most
    max_num_batched_tokens: int = 8192  # prefill tokens in one step
    watermark: float = 0.01  # admit only while this share of the pool stays free
    kernel: Kernel = "native"  # decode attention: native (C) or numpy
    n: int = 1  # samples per request (the samples workload: 8)
    temperature: float = 0.0  # 0: greedy; sample i of a request draws from its seed + i
    num_requests: int = 1000  # section46 and prefix: requests in all
    prompt_min: int = 50  # section46: shortest prompt; batch: every prompt
    prompt_max: int = 499  # section46: longest prompt
    output_mean: float = 200.0  # section46: mean output length (geometric)
    output_cap: int = 2048  # section46: longest output
    sample_prompt_tokens: int = 1000  # samples: the shared prompt
    sample_tokens: int = 200  # samples: tokens each sample generates
    system_prompt_tokens: int = 512  # prefix: what every prompt starts with
    user_prompt_tokens: int = 32  # prefix: each prompt's own part after it
    in_flight: int = 4  # prefix: requests each client keeps outstanding
    new_tokens: int = 16  # prefix and batch: tokens each request generates
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # batch: sequences decoded together
    verify_every: int = 0  # clients compare every k-th request with dense generation (0: none)
    check_invariants: bool = False  # the policy's invariants after every step (slow; for tests)
    lease_s: float = 30.0  # a client silent this long loses its requests
    endpoint: Literal["tcp", "ipc"] = "tcp"  # the server's socket
    seed: int = 0  # section46: the requests' draws; samples: the samples' seed

    def __post_init__(self):
        positive = (
            "capacity_tokens block_size max_num_seqs max_num_batched_tokens n num_requests prompt_min "
            "output_cap sample_prompt_tokens sample_tokens system_prompt_tokens user_prompt_tokens in_flight "
            "new_tokens max_new_tokens"
        )
        for name in positive.split():
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        check_pool_params(self)
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ParamError("batch_sizes", f"a non-empty list of sizes >= 1, got {list(self.batch_sizes)}")
        if not 0 <= self.watermark < 1:
            raise ParamError("watermark", f"must be in [0, 1), got {self.watermark}")
        for name in ("output_mean", "lease_s"):
            if getattr(self, name) <= 0:
                raise ParamError(name, f"must be > 0, got {getattr(self, name)}")
        if self.prompt is not None:
            try:
                if not self.prompt.encode("utf-8"):
                    raise ParamError("prompt", "must not be empty")
            except UnicodeEncodeError as e:
                raise ParamError(
                    "prompt",
                    f"must be UTF-8 text; byte {e.object[e.start : e.end].encode('utf-8', 'surrogateescape')!r}"
                    f" at {e.start} is not",
                ) from None
        for name in ("temperature", "verify_every", "show_texts"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0, got {getattr(self, name)}")


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < 2:
        raise ParamError("ranks", f"serving needs one server and at least one client (>= 2), got {ranks}")
    try:
        served.check_model(params)
    except ParamError as e:  # a random model's own keys are under params
        raise e if e.field.startswith("params.") else ParamError(f"params.{e.field}", e.message) from None


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # two cores: the server's matrix products and the clients' share them
    asked = params.model
    params = served.resolve(params, comm.run_dir.parent if comm.run_dir else None)
    if comm.rank == 0:
        return _serve(comm, params, asked)
    return _client(comm, params)


def _serve(comm, p: Params, asked: str | None) -> dict:
    """Rank 0: every setup served to the clients in turn (a restarted run goes on from the
    setups it finished), the engine's figures for the report. (Longer than most: one setup's
    life, from its engine to its record, in order.)"""
    model = served.served_model(p)
    setups = served.setups(p)
    shape = step_model.StepShape.of(model.config)
    rates = step_model.measure_rates(model) if p.workload in ("section46", "batch") else None
    per_setup = resume.finished(comm.run_dir, len(setups))  # a restarted run goes on where it was
    first = min(len(per_setup), len(setups) - 1)
    thread = start_server_thread(
        comm, p.endpoint, served.new_serving_server(p, *setups[first], model), "serving"
    )
    comm.bcast_obj(len(per_setup))
    try:
        for k in range(len(per_setup), len(setups)):
            policy, caching = setups[k]
            journal = resume.journal(comm.run_dir, k)
            resumed = journal is not None and journal.exists()
            thread.server = srv = served.new_serving_server(p, policy, caching, model, journal)
            comm.barrier()
            t0 = time.monotonic()
            clients = collect_results(
                comm,
                srv,
                p,
                policy,
                thread,
                lambda srv=srv: (srv.engine.num_finished_requests + srv.answers.num_loaded, _total(p)),
                "serving",
            )
            srv.close()
            per_setup.append(
                {
                    "policy": policy,
                    "prefix_caching": caching,
                    "resumed": resumed,
                    "asked": _asked(p),
                    "elapsed_s": time.monotonic() - t0,
                    "stats": srv.stats(),
                    "samples": downsample(srv.samples),
                    "step_log": downsample(srv.engine.step_log),
                    "split": serving_stats.step_split(
                        srv.engine.step_log,
                        step_model.predict_log(shape, rates, srv.engine.step_log) if rates else None,
                    ),
                    "clients": clients,
                }
            )
            resume.save(comm.run_dir, k, per_setup[-1])
    finally:
        thread.stopping.set()
        thread.join(5)
        thread.live.close()
    return {
        "ok": True,
        "address": thread.address,
        "model": model.config.to_dict(),
        "model_path": p.model,
        "served": served.describe(p, asked),
        "rates": rates.to_dict() if rates else None,
        "shape": shape.to_dict(),
        "setups": per_setup,
    }


def _asked(p: Params) -> int:
    """The requests the clients send in one setup."""
    own = 1 if p.prompt is not None else 0
    return {"section46": p.num_requests + own, "prefix": p.num_requests, "samples": 2}.get(
        p.workload, sum(p.batch_sizes)
    )


def _total(p: Params) -> int:
    own = 1 if p.prompt is not None else 0
    return {"section46": p.num_requests + own, "prefix": p.num_requests, "samples": p.n + 1}.get(
        p.workload, sum(p.batch_sizes)
    )


def _client(comm, p: Params) -> dict:
    address = comm.bcast_obj(None)
    done = comm.bcast_obj(None)  # setups a previous start of this run finished
    model = served.served_model(p) if p.verify_every else None
    client = rank_client(comm, address)
    try:
        client.ping()
        for _setup in served.setups(p)[done:]:  # the server is swapped between barriers
            comm.barrier()
            result = serving_clients.run_workload(comm, client, p, model)
            comm.send_obj(result, 0, TAG_RESULT)
    finally:
        client.close()
    return {"ok": True}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    r0 = results[0]
    return serving_report.report(r0["setups"], params, run_dir, r0)


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # threads beside the rank's own (server, load generator)
)
