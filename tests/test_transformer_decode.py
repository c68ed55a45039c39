"""Decoding through the pluggable attention equals the full causal forward; generation and sampling."""

import numpy as np
import pytest

from playground.core.errors import UsageError
from playground.transformer import (
    DenseKVCache,
    ModelConfig,
    Transformer,
    cached_attention,
    generate,
    sample_token,
)

TOLERANCE = {"float64": 1e-12, "float32": 1e-5}  # relative to the largest logit


def model_of(dtype: str, context: int = 12) -> Transformer:
    model = Transformer(ModelConfig(layers=2, d_model=16, heads=4, context=context, dtype=dtype), seed=5)
    model.params += np.random.default_rng(6).standard_normal(model.params.size).astype(dtype) * 0.1
    return model


def assert_close(got, want, dtype):
    assert np.abs(got - want).max() <= TOLERANCE[dtype] * np.abs(want).max()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_prefill_then_one_token_at_a_time_equals_the_full_forward(dtype):
    model = model_of(dtype)
    tokens = np.random.default_rng(0).integers(0, 256, 12)
    full = model.logits(tokens[None])[0]
    cache = DenseKVCache(model.config)
    got = [model.step(tokens[:5], cache.begin_step([7], [5]), cache)]
    for t in range(5, 12):
        got.append(model.step(tokens[t : t + 1], cache.begin_step([7], [1]), cache))
    assert cache.length(7) == 12
    assert_close(np.concatenate(got), full, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_batched_step_over_sequences_of_different_lengths_equals_each_full_forward(dtype):
    """The engine step: several sequences, a prefill for a new one and one token for each
    running one, packed into one call."""
    model = model_of(dtype)
    rng = np.random.default_rng(1)
    seqs = {0: rng.integers(0, 256, 9), 1: rng.integers(0, 256, 4), 2: rng.integers(0, 256, 12)}
    cache = DenseKVCache(model.config)
    for seq_id, prompt_len in ((0, 6), (1, 1)):
        model.step(seqs[seq_id][:prompt_len], cache.begin_step([seq_id], [prompt_len]), cache)
    # sequence 2 is admitted with its whole prefill while 0 and 1 decode one token each
    ids, num_new = [0, 2, 1], [1, 7, 1]
    starts = [cache.length(i) for i in ids]
    packed = np.concatenate([seqs[i][s : s + n] for i, s, n in zip(ids, starts, num_new, strict=True)])
    positions = cache.begin_step(ids, num_new)
    np.testing.assert_array_equal(positions, [6, *range(7), 1])
    logits = model.step(packed, positions, cache)
    row = 0
    for seq_id, start, n in zip(ids, starts, num_new, strict=True):
        full = model.logits(seqs[seq_id][None, : start + n])[0]
        assert_close(logits[row : row + n], full[start : start + n], dtype)
        row += n


def test_cached_attention_masks_the_future_of_each_new_token():
    rng = np.random.default_rng(2)
    keys, values = rng.standard_normal((2, 5, 3, 4))
    q = rng.standard_normal((2, 3, 4))  # the last two of five tokens
    out = cached_attention(q, keys, values, first_position=3)
    for i, position in enumerate((3, 4)):
        for h in range(3):
            scores = keys[: position + 1, h] @ q[i, h] / 2
            w = np.exp(scores - scores.max())
            np.testing.assert_allclose(out[i, h], (w / w.sum()) @ values[: position + 1, h], rtol=1e-12)


def test_begin_step_refuses_what_does_not_fit_and_changes_nothing():
    cache = DenseKVCache(ModelConfig(layers=1, d_model=8, heads=2, context=4))
    cache.begin_step([0], [3])
    with pytest.raises(UsageError, match="context=4"):
        cache.begin_step([1, 0], [1, 2])
    assert cache.length(0) == 3 and cache.length(1) == 0
    with pytest.raises(UsageError):
        cache.begin_step([0, 0], [1, 1])
    cache.free(0)
    assert cache.length(0) == 0


def test_step_refuses_positions_beyond_the_context():
    model = model_of("float32", context=4)
    with pytest.raises(UsageError, match="positions"):
        model.step(np.array([1]), np.array([4]), DenseKVCache(model.config))


def test_greedy_generation_equals_argmax_of_the_full_forward_also_past_the_context():
    """nanoGPT's generate (crop to the last `context` tokens, full forward, argmax) written out,
    against the cached one, over 3 windows' worth of tokens."""
    model = model_of("float64", context=6)
    prompt = b"abc"
    new = generate(model, prompt, 15)
    tokens = list(prompt)
    for _ in range(15):
        tokens.append(int(np.argmax(model.logits(np.array(tokens[-6:])[None])[0, -1])))
    assert new.tolist() == tokens[3:]
    assert new.dtype == np.int64


def test_sampling_is_seeded_and_follows_the_temperature():
    model = model_of("float32")
    a = generate(model, "xy", 20, temperature=1.0, seed=3)
    assert a.tolist() == generate(model, "xy", 20, temperature=1.0, seed=3).tolist()
    assert a.tolist() != generate(model, "xy", 20, temperature=1.0, seed=4).tolist()
    logits = np.array([0.0, 2.0, 1.0, 2.0])
    assert sample_token(logits, 0.0) == 1  # greedy takes the first largest
    draws = [sample_token(logits, 1.0, np.random.default_rng(s)) for s in range(2000)]
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 2000, p, atol=0.04)
    cold = [sample_token(logits, 1e-3, np.random.default_rng(s)) for s in range(50)]
    assert set(cold) == {1, 3}


def test_generate_refuses_an_empty_prompt():
    with pytest.raises(UsageError, match="prompt"):
        generate(model_of("float32"), b"", 3)
