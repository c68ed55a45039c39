"""The engine on one shard of a tensor-parallel model, as vLLM runs a worker per GPU: the same
scheduler, runner and pool code over the heads this rank computes.

A model built with a tensor plan (`playground.transformer.tensor_plan`) attends over its own
`model.heads` heads, so its pool holds only those heads' keys and values (a `KVLayout` of
`heads / t` heads: 1/t of the one-process pool's bytes per token, in as many slots), and the rest
of the engine is unchanged: `LLMEngine` over that pool. Every rank of the tensor group runs its own
engine, and they agree on every step without a message because each runs the same deterministic
scheduler over the same requests, added in the same order, and samples from the same logits: the
head is replicated, and the all-reduces that complete each block leave every shard the same bits.
(vLLM's driver worker schedules and broadcasts instead; ours needs no broadcast because nothing in
a step depends on anything but the requests and the logits.)
"""

import time

from playground.kvcache.engine.config import DEFAULT_ENGINE, EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.policies import make_policy
from playground.transformer.model import Transformer


class SeqIds:
    """Sequence ids 0, 1, 2, ... (the engine's `new_seq_ids`): the same on every shard."""

    def __init__(self):
        self.next = 0

    def __call__(self, k: int) -> list[int]:
        ids = list(range(self.next, self.next + k))
        self.next += k
        return ids


def shard_engine(
    model: Transformer,
    capacity_tokens: int,
    block_size: int = 16,
    policy: str = "paged",
    config: EngineConfig = DEFAULT_ENGINE,
    clock=time.monotonic,
) -> LLMEngine:
    """An engine over a fresh pool of `capacity_tokens` slots of `model`'s own heads. Collective
    over the model's tensor group when it is split: the engine warms the model up with a step."""
    c = model.config
    allocator = make_policy(policy, capacity_tokens, block_size)
    layout = KVLayout(c.layers, model.heads, c.head_dim)
    pool = KVPool(allocator.capacity_slots, layout.width, layout)
    return LLMEngine(model, allocator, pool, config, new_seq_ids=SeqIds(), clock=clock)
