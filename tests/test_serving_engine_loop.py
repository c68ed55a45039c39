"""The HTTP server's engine loop (serving/http/engine_loop.py) losing its engine: a step that raises
mid-generation makes the loop build a new engine and run every live request again from its prompt;
each request ends once, with the tokens of dense generation (greedy and seeded, n = 2), none given
twice to its handler; past `max_restarts` every live request gets the error once and the loop says
why."""

import threading

import pytest
from tools import importable, need

from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.engine.sequence import SamplingParams
from playground.kvcache.engine.tensor_parallel import SeqIds
from playground.serving.http.engine_loop import EngineLoop, Output
from playground.transformer import ModelConfig, Transformer, generate

MODEL = Transformer(ModelConfig(layers=2, d_model=32, heads=4, context=64), seed=1)
ASKED = {1: ("greedy", SamplingParams(40)), 2: ("seeded", SamplingParams(40, n=2, temperature=0.9, seed=7))}


def new_engine(fail_at_step: int | None = None) -> LLMEngine:
    """An engine over a fresh pool; its step `fail_at_step` raises (a bug, or its memory lost)."""
    layout = KVLayout(2, 4, 8)
    policy = make_policy("paged", 2048, 4, False, 64)
    engine = LLMEngine(MODEL, policy, KVPool(policy.capacity_slots, layout.width, layout), EngineConfig(),
                       new_seq_ids=SeqIds())  # fmt: skip
    if fail_at_step is not None:
        step = engine.step

        def failing_step():
            if engine.num_steps == fail_at_step:
                raise MemoryError("the engine's pool is gone")
            return step()

        engine.step = failing_step
    return engine


class Handler:
    """What one request's handler receives: every Output, and when the last came."""

    def __init__(self):
        self.outputs: list[Output] = []
        self.ended = threading.Event()

    def deliver(self, out: Output) -> None:
        self.outputs.append(out)
        if out.finished or out.error:
            self.ended.set()

    def tokens(self) -> list[list[int]]:
        samples = [[] for _ in self.outputs[0].token_ids]
        for out in self.outputs:
            for sample, new in zip(samples, out.token_ids, strict=True):
                sample += new
        return samples


def run(loop: EngineLoop) -> dict[int, Handler]:
    handlers = {rid: Handler() for rid in ASKED}
    loop.start()
    try:
        for rid, (text, params) in ASKED.items():
            loop.submit(rid, list(text.encode()), params, handlers[rid].deliver)
        for h in handlers.values():
            assert h.ended.wait(30)
    finally:
        loop.stop()
    return handlers


def dense(text: str, p: SamplingParams) -> list[list[int]]:
    return [generate(MODEL, list(text.encode()), p.max_new_tokens, temperature=p.temperature, seed=p.seed + i).tolist()
            for i in range(p.n)]  # fmt: skip


@pytest.mark.timeout(60)
def test_a_failed_step_rebuilds_the_engine_and_every_request_ends_once_with_its_tokens():
    loop = EngineLoop(new_engine(fail_at_step=10), rebuild=new_engine)
    handlers = run(loop)
    assert len(loop.restarts) == 1 and "MemoryError" in loop.restarts[0] and not loop.failure
    for rid, (text, params) in ASKED.items():
        outs = handlers[rid].outputs
        assert (
            [o.finished for o in outs].count(True) == 1
            and outs[-1].finished
            and not any(o.error for o in outs)
        )
        assert handlers[rid].tokens() == dense(text, params), rid  # nothing given twice, nothing missing
    assert loop.engine.stats()["requests"] == 0 and loop.engine.policy.allocated_slots() == 0


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread ends raising
def test_past_its_restarts_the_loop_fails_every_request_once_and_says_why():
    loop = EngineLoop(new_engine(fail_at_step=3), rebuild=lambda: new_engine(fail_at_step=2), max_restarts=2)
    handlers = run(loop)
    assert loop.failure == "the engine failed (after 2 restarts): MemoryError: the engine's pool is gone"
    for h in handlers.values():
        assert [o.error for o in h.outputs if o.error] == [loop.failure] and not any(
            o.finished for o in h.outputs
        )


@pytest.mark.timeout(60)
def test_the_served_loop_rebuilds_its_engine_and_counts_it():
    need(importable("uvicorn") and importable("prometheus_client"), "pip install -e '.[serve]'")
    from playground.serving.http.server import ServeConfig, build_served

    config = ServeConfig(
        model="random", random_shape=MODEL.config, model_seed=1, capacity_tokens=2048, block_size=4
    )
    served = build_served(config, MODEL)
    first = served.loop.engine
    step = first.step
    first.step = lambda: step() if first.num_steps != 5 else (_ for _ in ()).throw(MemoryError("lost"))
    handlers = run(served.loop)
    assert served.loop.engine is not first and len(served.loop.restarts) == 1
    for rid, (text, params) in ASKED.items():
        assert handlers[rid].tokens() == dense(text, params)
    assert b"playground_engine_restarts_total 1.0" in served.metrics.exposition()
