"""Chunked prefill (scheduler.py): a token budget per step, long prompts split into chunks beside
the running decodes; the tokens equal prefill-first scheduling's and dense generation's."""

import numpy as np
import pytest

from playground.core.errors import UsageError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.engine.sequence import SamplingParams
from playground.kvcache.engine.tensor_parallel import SeqIds
from playground.transformer import ModelConfig, Transformer, generate

CONFIG = ModelConfig(layers=2, d_model=32, heads=4, context=96)
MODEL = Transformer(CONFIG, seed=3)
# long and short prompts mixed, one longer than the context (a window restart)
PROMPTS = ["x" * 70, "hi", list(range(1, 40)), "short one", "z" * 120, "paged attention " * 3]


def new_engine(config: EngineConfig, policy="paged", capacity=2048) -> LLMEngine:
    allocator = make_policy(policy, capacity, 4, max_new_tokens=64)
    layout = KVLayout(CONFIG.layers, CONFIG.heads, CONFIG.head_dim)
    return LLMEngine(
        MODEL, allocator, KVPool(allocator.capacity_slots, layout.width, layout), config, new_seq_ids=SeqIds()
    )


def run_engine(config: EngineConfig, prompts, max_new=20, temperature=0.0, policy="paged", capacity=2048):
    """Every prompt added at once (request i: seed i); its tokens, and the engine's step log."""
    engine = new_engine(config, policy, capacity)
    for i, p in enumerate(prompts):
        tokens = list(p.encode()) if isinstance(p, str) else p
        engine.add_request(b"", i, tokens, SamplingParams(max_new, temperature=temperature, seed=i))
    done = {}
    while engine.has_work():
        finished, num_tokens = engine.step()
        assert num_tokens, engine.scheduler  # every step runs something
        for request in finished:
            done[request.reply_id] = request.seqs[0].token_ids[len(request.prompt) :]
    assert engine.policy.allocated_slots() == 0
    engine.policy.check_invariants()
    return [done[i] for i in range(len(prompts))], engine


@pytest.mark.parametrize("policy,temperature", [("paged", 0.0), ("paged", 0.8), ("contiguous", 0.0)])
def test_chunked_prefill_yields_the_tokens_of_prefill_first_and_of_dense_generation(policy, temperature):
    plain, _ = run_engine(EngineConfig(), PROMPTS, temperature=temperature, policy=policy)
    chunked, engine = run_engine(
        EngineConfig(chunked_prefill=True, max_num_batched_tokens=16),
        PROMPTS,
        temperature=temperature,
        policy=policy,
    )
    assert chunked == plain
    if policy == "paged":
        for i, p in enumerate(PROMPTS):
            assert chunked[i] == generate(MODEL, p, 20, temperature=temperature, seed=i).tolist()
    steps = np.array(engine.step_log)
    assert steps[:, 1:3].sum(axis=1).max() <= 16  # decodes + prefill tokens within the budget


def test_a_long_prompt_runs_in_chunks_beside_the_decodes_instead_of_stalling_them():
    engine = new_engine(EngineConfig(chunked_prefill=True, max_num_batched_tokens=8))
    engine.add_request(b"", 0, list(b"short"), SamplingParams(30))
    engine.step()  # the short prompt is prefilled and decodes from now on
    engine.add_request(b"", 1, list(b"L" * 60), SamplingParams(5))
    steps = []
    while engine.has_work():
        engine.step()
        steps.append(engine.step_log[-1][1:3])  # (decodes, prefill tokens)
    prefill_steps = [d for d, p in steps if p]
    assert len(prefill_steps) >= 60 // 8  # the 60-token prompt took several steps ...
    assert all(d >= 1 for d in prefill_steps)  # ... each of them decoding the short one too


def test_a_budget_smaller_than_the_decodes_still_decodes_and_prefills_later():
    tokens, _ = run_engine(
        EngineConfig(chunked_prefill=True, max_num_batched_tokens=2), PROMPTS[:4], max_new=6
    )
    assert tokens == run_engine(EngineConfig(), PROMPTS[:4], max_new=6)[0]


def test_chunked_prefill_refuses_prefix_caching():
    with pytest.raises(UsageError, match="chunked_prefill"):
        from playground.kvcache.engine.policies import make_policy
        from playground.kvcache.engine.scheduler import Scheduler

        Scheduler(make_policy("paged", 64, 4), 96, EngineConfig(chunked_prefill=True), prefix_caching=True)
