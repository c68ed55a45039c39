"""Generation with a KV cache: prefill the prompt, then one token at a time, attention pluggable.

`Transformer.step(tokens, positions, attend)` runs any packed batch of new tokens; the cache is
the `attend` callable. `DenseKVCache` is the reference one: each sequence's K and V of every layer
in one contiguous (layers, context, heads, head_dim) pair of arrays. A step is planned first
(`begin_step(seq_ids, num_new)` reserves the new tokens' slots, as vLLM's scheduler does before
the model runs, and returns their positions), then the model calls the cache once per layer.
`cached_attention` is the attention of one sequence's new queries over its cached keys and
values: the dense reference a paged implementation must equal.

Past the context window, `generate` does what nanoGPT's `generate` does (crop to the last
`context` tokens): learned positions stop at context - 1, so each further token is a fresh
prefill of the last `context` tokens (a recompute, as vLLM's preemption by recompute).
"""

import math
from collections.abc import Sequence

import numpy as np

from playground.core.errors import UsageError
from playground.transformer.config import ModelConfig
from playground.transformer.layers import softmax
from playground.transformer.model import Transformer


def cached_attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, first_position: int) -> np.ndarray:
    """q (n, H, hd) of a sequence's new tokens at positions first_position.. first_position + n - 1,
    over keys and values (m, H, hd) of its positions 0..m-1 (m = first_position + n, the new ones
    included): each query sees the keys at and before its position. Returns (n, H, hd)."""
    n, m = q.shape[0], keys.shape[0]
    scores = (q.transpose(1, 0, 2) @ keys.transpose(1, 2, 0)) * (1 / math.sqrt(q.shape[-1]))  # (H, n, m)
    future = np.arange(m)[None, :] > first_position + np.arange(n)[:, None]
    scores[:, future] = -np.inf
    return (softmax(scores) @ values.transpose(1, 0, 2)).transpose(1, 0, 2)


class DenseKVCache:
    """A contiguous KV cache for any number of sequences, usable as `Transformer.step`'s `attend`;
    of `heads` heads (default: the model's; a tensor-parallel shard caches its own heads)."""

    def __init__(self, config: ModelConfig, heads: int | None = None):
        self.config, self.heads = config, heads or config.heads
        self._keys: dict[int, np.ndarray] = {}
        self._values: dict[int, np.ndarray] = {}
        self._lengths: dict[int, int] = {}
        self._step: list[tuple[int, int, int]] = []  # (seq_id, first position, new tokens)

    def length(self, seq_id: int) -> int:
        return self._lengths.get(seq_id, 0)

    def free(self, seq_id: int) -> None:
        for table in (self._keys, self._values, self._lengths):
            table.pop(seq_id, None)

    def begin_step(self, seq_ids: Sequence[int], num_new: Sequence[int]) -> np.ndarray:
        """Reserve `num_new[i]` tokens for sequence `seq_ids[i]` (created on first use); the step's
        tokens are packed in this order. Returns their positions (sum(num_new),)."""
        if len(seq_ids) != len(num_new) or len(set(seq_ids)) != len(seq_ids):
            raise UsageError(f"one entry per distinct sequence, got seq_ids={seq_ids}, num_new={num_new}")
        c = self.config
        for seq_id, n in zip(seq_ids, num_new, strict=True):
            if n < 1 or self.length(seq_id) + n > c.context:
                raise UsageError(
                    f"sequence {seq_id}: {n} new tokens after {self.length(seq_id)} do not fit context={c.context}",
                    field="num_new",
                )
        self._step = []
        for seq_id, n in zip(seq_ids, num_new, strict=True):
            if seq_id not in self._lengths:
                shape = (c.layers, c.context, self.heads, c.head_dim)
                self._keys[seq_id] = np.zeros(shape, c.np_dtype)
                self._values[seq_id] = np.zeros(shape, c.np_dtype)
                self._lengths[seq_id] = 0
            self._step.append((seq_id, self._lengths[seq_id], n))
            self._lengths[seq_id] += n
        return np.concatenate([np.arange(first, first + n) for _, first, n in self._step])

    def __call__(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = np.empty_like(q)
        row = 0
        for seq_id, first, n in self._step:
            keys, values = self._keys[seq_id][layer], self._values[seq_id][layer]
            keys[first : first + n] = k[row : row + n]
            values[first : first + n] = v[row : row + n]
            rows = slice(row, row + n)
            out[rows] = cached_attention(q[rows], keys[: first + n], values[: first + n], first)
            row += n
        return out


def sample_token(logits: np.ndarray, temperature: float, rng: np.random.Generator | None = None) -> int:
    """Greedy (the first largest logit) at temperature 0; otherwise one draw `u = rng.random()`
    inverted through the cumulative softmax(logits / temperature), computed in float64, so that
    any implementation holding the same generator draws the same token."""
    if temperature == 0:
        return int(np.argmax(logits))
    if temperature < 0 or rng is None:
        raise UsageError(f"must be >= 0 (and > 0 needs a generator), got {temperature}", field="temperature")
    cumulative = np.cumsum(softmax(np.asarray(logits, dtype=np.float64) / temperature))
    return int(
        min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(cumulative) - 1)
    )


def prompt_tokens(prompt: bytes | str | Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(prompt, str):
        prompt = prompt.encode()
    if isinstance(prompt, bytes | bytearray):
        return np.frombuffer(bytes(prompt), dtype=np.uint8).astype(np.int64)
    return np.asarray(prompt, dtype=np.int64).reshape(-1)


def generate(
    model: Transformer,
    prompt: bytes | str | Sequence[int] | np.ndarray,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    seed: int = 0,
) -> np.ndarray:
    """The `max_new_tokens` tokens (int64) that follow `prompt`, greedy at temperature 0, else
    sampled with `np.random.default_rng(seed)`."""
    tokens = list(prompt_tokens(prompt))
    if not tokens:
        raise UsageError("needs at least one token", field="prompt")
    if max_new_tokens < 0:
        raise UsageError(f"must be >= 0, got {max_new_tokens}", field="max_new_tokens")
    context, rng = model.config.context, np.random.default_rng(seed)
    cache = DenseKVCache(model.config, model.heads)

    def prefill(window: list[int]) -> np.ndarray:
        cache.free(0)
        return model.step(np.array(window), cache.begin_step([0], [len(window)]), cache)[-1]

    logits = prefill(tokens[-context:])
    new: list[int] = []
    while len(new) < max_new_tokens:
        token = sample_token(logits, temperature, rng)
        new.append(token)
        tokens.append(token)
        if len(new) == max_new_tokens:
            break
        if cache.length(0) == context:  # the window is full: recompute over the last `context`
            logits = prefill(tokens[-context:])
        else:
            logits = model.step(np.array([token]), cache.begin_step([0], [1]), cache)[-1]
    return np.array(new, dtype=np.int64)
