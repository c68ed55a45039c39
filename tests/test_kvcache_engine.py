"""The served model, in one process (ModelServer.handle + step, no sockets): what it generates equals
dense generation token for token under every policy, with forks, preemptions, prefix caching and
context windows; nothing is held afterwards; generate's error replies; a vanished client's
requests are dropped by its lease."""

import functools

import numpy as np
import pytest

from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.server import protocol as P
from playground.kvcache.server.generate import ModelServer
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.local_client import LocalClient
from playground.transformer import ModelConfig, Transformer, generate

CONFIG = ModelConfig(layers=2, d_model=32, heads=4, context=48)
MODEL = Transformer(CONFIG, seed=1)
PROMPTS = ["hello world", "paged attention", list(range(1, 14)), "x" * 40, "y"]


class Clock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self):
        return self.now_s


def serve(policy, capacity=400, block_size=4, prefix=False, kernel="native", clock=None, **engine):
    return ModelServer(
        policy,
        capacity,
        block_size,
        MODEL,
        enable_prefix_caching=prefix,
        max_new_tokens=64,
        check_invariants=True,
        engine_config=EngineConfig(kernel=kernel, **engine),
        **({"clock": clock} if clock else {}),
    )


def run(server, prompts, max_new=30, n=1, temperature=0.0):
    """Every prompt submitted at once (request i with seed i); the replies by prompt index."""
    client = LocalClient(server)
    ids = [client.submit(p, max_new, n=n, temperature=temperature, seed=i) for i, p in enumerate(prompts)]
    replies = client.collect(ids)
    return [replies[i] for i in ids]


@functools.cache
def dense(prompt, max_new: int, temperature: float, seed: int) -> list[int]:
    """playground.transformer.generate: one sequence, a dense contiguous KV cache (cached: the
    tests ask for the same ones again and again)."""
    return generate(
        MODEL,
        list(prompt) if isinstance(prompt, tuple) else prompt,
        max_new,
        temperature=temperature,
        seed=seed,
    ).tolist()


def assert_dense(replies, prompts, max_new, n, temperature):
    for i, (prompt, reply) in enumerate(zip(prompts, replies, strict=True)):
        assert reply["ok"], reply
        key = tuple(prompt) if isinstance(prompt, list) else prompt
        for k in range(n):
            assert reply["tokens"][k] == dense(key, max_new, temperature, i + k), f"prompt {i} sample {k}"


def assert_nothing_held(server):
    st = server.stats()
    assert st["allocated_slots"] == 0 and st["used_slots"] == 0
    assert st["engine"]["requests"] == st["engine"]["running"] == st["engine"]["waiting"] == 0
    assert not server.has_work()


@pytest.mark.parametrize("policy", ["paged", "contiguous", "reserve_max"])
@pytest.mark.parametrize("n,temperature", [(1, 0.0), (3, 0.0), (3, 0.9)])
def test_served_tokens_equal_dense_generation(policy, n, temperature):
    """Prompts longer than the context, and outputs past it, included (window restarts)."""
    server = serve(policy)
    replies = run(server, PROMPTS, 30, n, temperature)
    assert_dense(replies, PROMPTS, 30, n, temperature)
    assert server.stats()["engine"]["window_restarts"] > 0
    if policy == "paged" and n > 1:
        assert server.stats()["cow_copies"] > 0
    assert_nothing_held(server)


@pytest.mark.parametrize(
    "policy,prefix", [("paged", False), ("paged", True), ("contiguous", False), ("reserve_max", False)]
)
@pytest.mark.parametrize("kernel", ["native", "numpy"])
def test_a_tight_pool_preempts_and_recomputes_and_still_equals_dense(policy, prefix, kernel):
    prompts = [f"the same system prompt, then: {i}" for i in range(6)]
    server = serve(policy, capacity=160, prefix=prefix, kernel=kernel)
    replies = run(server, prompts, 25, n=2, temperature=0.5)
    assert_dense(replies, prompts, 25, 2, 0.5)
    engine = server.stats()["engine"]
    assert engine["preempted"] > 0 or policy == "reserve_max"
    if prefix:
        assert [r["num_cached_tokens"] for r in replies][1:] == [28] * 5  # 7 full blocks of 4
    assert_nothing_held(server)


def test_a_prompt_found_whole_in_the_cache_recomputes_its_last_token_only():
    prompt = list(range(1, 17))  # 4 full blocks of 4
    server = serve("paged", prefix=True)
    client = LocalClient(server)
    first = client.submit(prompt, 20, seed=0)  # holds the blocks while the second arrives
    second = client.submit(prompt, 20, seed=1)
    replies = client.collect([first, second])
    assert replies[second]["num_cached_tokens"] == 16
    assert_dense([replies[first], replies[second]], [prompt, prompt], 20, 1, 0.0)
    assert_nothing_held(server)


def test_n_samples_fork_the_prompt_and_match_copies_and_separate_requests_lecture_45():
    """Lecture 4.5 with generated tokens: a 100-token prompt, 4 samples of 10 -> 10 pages forked,
    28 pages as 4 copies of the prompt (share_prompt false) or 4 separate requests (the 10th
    token's KV is never written)."""
    config = ModelConfig(layers=2, d_model=32, heads=4, context=128)
    model = Transformer(config, seed=2)
    prompt = list(range(100))
    pages = {}
    for mode in ("fork", "copies", "separate"):
        server = ModelServer("paged", 4096, 16, model, check_invariants=True)
        client = LocalClient(server)
        if mode == "separate":  # sample i of the others is request i with seed + i
            ids = [client.submit(prompt, 10, temperature=1.0, seed=7 + i) for i in range(4)]
        else:
            ids = [client.submit(prompt, 10, n=4, temperature=1.0, seed=7, share_prompt=mode == "fork")]
        replies = client.collect(ids)
        tokens = [t for rid in ids for t in replies[rid]["tokens"]]
        pages[mode] = (server.stats()["engine"]["peak_allocated_slots"] // 16, tokens)
        assert_nothing_held(server)
    assert pages["fork"][0] == 10 and pages["copies"][0] == pages["separate"][0] == 28
    assert pages["fork"][1] == pages["copies"][1] == pages["separate"][1]


def test_generate_error_replies_and_the_server_goes_on():
    server = serve("paged", capacity=32)  # 8 blocks: less than one 48-token window

    def refused(**fields):
        frames = server.handle(b"A", P.encode_request("generate", **fields))
        assert frames is not None, fields
        return P.decode_reply(frames)[0]

    assert refused(prompt="", max_new_tokens=3)["error"] == P.BAD_REQUEST
    assert refused(prompt=[1, 300], max_new_tokens=3)["error"] == P.BAD_REQUEST
    assert "'prompt'" in refused(prompt=5, max_new_tokens=3)["message"]
    assert "'max_new_tokens'" in refused(prompt="a", max_new_tokens=0)["message"]
    assert "'n'" in refused(prompt="a", max_new_tokens=2, n=0)["message"]
    assert "'temperature'" in refused(prompt="a", max_new_tokens=2, temperature=-1)["message"]
    h = refused(prompt="a" * 40, max_new_tokens=30)  # a full window, 48 tokens, can never fit
    assert h["error"] == P.OUT_OF_MEMORY and h["fits_when_empty"] is False
    frames = server.handle(
        b"A", P.encode_request("generate", np.ones(2, np.float32), prompt="a", max_new_tokens=2)
    )
    assert P.decode_reply(frames)[0]["error"] == P.BAD_FRAME
    opaque = KVServer("paged", capacity_tokens=64, block_size=4, width=8)
    frames = opaque.handle(b"A", P.encode_request("generate", prompt="a", max_new_tokens=2))
    assert P.decode_reply(frames)[0]["error"] == P.NO_MODEL
    assert run(server, ["ok"], 3)[0]["ok"]  # still serving


def test_a_client_that_vanishes_mid_generate_is_dropped_by_its_lease():
    clock = Clock()
    server = serve("paged", clock=clock)
    server.lease_s = 1.0
    assert server.handle(b"gone", P.encode_request("generate", id=1, prompt="abc", max_new_tokens=40)) is None
    for _ in range(3):
        server.step()
    assert server.stats()["allocated_slots"] > 0
    clock.now_s = 0.5
    server.handle(b"other", P.encode_request("ping"))
    clock.now_s = 2.0  # "gone" has been silent for 2 s
    assert server.expire_leases() == []  # no client-created sequences, but the engine's are freed
    st = server.stats()
    assert st["expired_seqs"] == 1 and st["allocated_slots"] == 0 and st["engine"]["requests"] == 0
    (client, frames), *_ = server.step()  # in case it is only slow: it is told
    assert client == b"gone" and P.decode_reply(frames)[0]["error"] == P.LEASE_EXPIRED
    assert_nothing_held(server)


def test_generate_replies_carry_the_timings():
    clock = Clock()
    server = serve("paged", clock=clock)
    client = LocalClient(server)
    rid = client.submit("timing", 4, n=2)
    clock.now_s = 1.0
    replies = {}
    while not replies:
        clock.now_s += 0.5
        replies = {P.decode_reply(f)[0]["id"]: P.decode_reply(f)[0] for _, f in server.step()}
    h = replies[rid]
    assert h["queue_s"] == 1.5 and h["ttft_s"] == 1.5 and h["e2e_s"] == 3.0
    assert h["token_times_s"] == [[1.5, 2.0, 2.5, 3.0]] * 2 and h["tpot_s"] == [0.5, 0.5]
    assert h["num_prompt_tokens"] == 6 and len(h["text"]) == 2 and h["preempted"] == 0
