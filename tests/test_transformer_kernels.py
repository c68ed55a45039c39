"""The native kernels (fused.py, native/transformer.c) against the numpy reference (layers.py): bit for
bit where the arithmetic is additions, products, divisions and square roots, to rounding where it
takes exp or tanh; an element's result never depends on where it sits (a rank's rows of a batch give
the bits the whole batch gives them); the model on either set computes the same loss and gradients."""

import numpy as np
import pytest

from playground.core.errors import UsageError
from playground.transformer import BatchSampler, ModelConfig, Transformer, fused, layers, lecture_bytes
from playground.transformer.kernels import ENVIRONMENT, KERNELS, get_kernels
from playground.transformer.optim import Adam, AdamConfig

DTYPES = ["float32", "float64"]
TOL = {"float32": 2e-6, "float64": 1e-14}  # relative to the largest magnitude: a few units of rounding


def rand(*shape, dtype="float64", seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def close(a, b, dtype):
    return np.max(np.abs(a - b)) <= TOL[dtype] * max(np.max(np.abs(b)), 1.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [3, 64, 100, 512, 768])  # numpy's pairwise sum: < 8, blocks of 8, halves
def test_layernorm_is_numpys_bit_for_bit(dtype, d):
    x, dout = rand(5, 3, d, dtype=dtype), rand(5, 3, d, dtype=dtype, seed=1)
    w, b = rand(d, dtype=dtype, seed=2), rand(d, dtype=dtype, seed=3)
    out_np, saved_np = layers.layernorm_forward(x, w, b)
    out_c, saved_c = fused.layernorm_forward(x, w, b)
    assert out_c.tobytes() == out_np.tobytes()
    assert all(
        c.tobytes() == n.tobytes() and c.shape == n.shape for c, n in zip(saved_c, saved_np, strict=True)
    )
    residual = rand(5, 3, d, dtype=dtype, seed=4)
    grads = {}
    for name, impl in (("numpy", layers), ("native", fused)):
        dw, db = np.empty(d, dtype), np.empty(d, dtype)
        dx = impl.layernorm_backward(dout, saved_np, w, dw, db)
        summed = impl.layernorm_backward(dout, saved_np, w, dw, db, residual=residual)
        in_place = residual.copy()
        impl.layernorm_backward(dout, saved_np, w, dw, db, residual=in_place, out=in_place)
        grads[name] = (dx, summed, in_place, dw, db)
    for c, n in zip(grads["native"], grads["numpy"], strict=True):
        assert c.tobytes() == n.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_agrees_to_rounding_and_its_backward_is_numpys_bits(dtype):
    x = rand(7, 301, dtype=dtype, scale=3)  # 301: a vector loop's tail too
    out_np, t_np = layers.gelu_forward(x)
    out_c, t_c = fused.gelu_forward(x)
    assert close(t_c, t_np, dtype) and close(out_c, out_np, dtype)
    dout = rand(7, 301, dtype=dtype, seed=1)
    given_t = layers.gelu_backward(dout, x, t_np), fused.gelu_backward(dout, x, t_np)
    assert given_t[1].tobytes() == given_t[0].tobytes()
    in_place = dout.copy()
    assert fused.gelu_backward(in_place, x, t_np, out=in_place) is in_place
    assert in_place.tobytes() == given_t[0].tobytes()


def test_tanh_saturates_without_overflow():
    x = np.array([-1e30, -1e4, -50.0, 0.0, 50.0, 1e4, 1e30], dtype=np.float32)
    out, t = fused.gelu_forward(x)
    assert np.all(np.isfinite(out)) and np.array_equal(t, [-1, -1, -1, 0, 1, 1, 1])
    assert np.array_equal(out, np.where(x > 0, x, np.float32(0)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T", [1, 5, 64, 100, 130])  # one query block; two, the second short
def test_causal_attention_agrees_with_numpy(dtype, T):
    qkv = rand(3, T, 3, 2, 8, dtype=dtype)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    dy = rand(3, T, 2, 8, dtype=dtype, seed=1)
    y_np, p_np = layers.causal_attention_forward(q, k, v)
    y_c, p_c = fused.causal_attention_forward(q, k, v)
    assert close(y_c, y_np, dtype) and close(p_c, p_np, dtype)
    assert np.all(np.triu(p_c, 1) == 0) and y_c.flags.c_contiguous
    dqkv = np.empty((3, T, 3 * 16), dtype)
    out = tuple(dqkv.reshape(3, T, 3, 2, 8)[:, :, i] for i in range(3))
    g_np = layers.causal_attention_backward(dy, q, k, v, p_np)
    g_c = fused.causal_attention_backward(dy, q, k, v, p_c, out=out)
    for c, n, o in zip(g_c, g_np, out, strict=True):
        assert close(c, n, dtype) and np.shares_memory(c, o)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_agrees_and_its_gradient_is_numpys_bits(dtype):
    logits, targets = rand(4, 9, 256, dtype=dtype, scale=4), np.random.default_rng(1).integers(0, 256, (4, 9))
    loss_np, p_np = layers.cross_entropy_forward(logits, targets, 50)
    loss_c, p_c = fused.cross_entropy_forward(logits.copy(), targets, 50)
    assert loss_c == pytest.approx(loss_np, rel=TOL[dtype]) and close(p_c, p_np, dtype)
    d_np = layers.cross_entropy_backward(p_np, targets, 50)
    d_c = fused.cross_entropy_backward(p_np.copy(), targets, 50)
    assert d_c.tobytes() == d_np.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_gradient_adds_repeats_in_numpys_order(dtype):
    tokens = np.array([[3, 1, 3], [3, 0, 1]])
    dx = rand(2, 3, 5, dtype=dtype)
    a = rand(4, 5, dtype=dtype, seed=1)
    b = a.copy()
    layers.embedding_backward(a, tokens, dx)
    fused.embedding_backward(b, tokens, dx)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_is_numpys_bit_for_bit_step_after_step(dtype):
    n, config = 1003, AdamConfig(lr=1e-2)
    states = {name: (rand(n, dtype=dtype), Adam(n, dtype, config, kernels=name)) for name in KERNELS}
    for step in range(5):
        grads = rand(n, dtype=dtype, seed=10 + step)
        for params, adam in states.values():
            adam.step(params, grads, lr=None if step < 3 else 3e-3)
    (p1, a1), (p2, a2) = states.values()
    assert (
        p1.tobytes() == p2.tobytes() and a1.m.tobytes() == a2.m.tobytes() and a1.v.tobytes() == a2.v.tobytes()
    )


def test_an_elements_result_does_not_depend_on_where_it_sits():
    """N ranks equal one process only if a rank's rows give the bits the whole batch gives them:
    no kernel's vector loop treats an element differently at another offset (its tail, say)."""
    x = rand(6, 37, dtype="float32", scale=3)
    whole, part = fused.gelu_forward(x), fused.gelu_forward(x[1:].copy())
    assert all(w[1:].tobytes() == p.tobytes() for w, p in zip(whole, part, strict=True))
    scores = rand(4, 37, 37, dtype="float32")
    qkv = rand(4, 37, 3, 1, 8, dtype="float32")
    y_all, p_all = fused.causal_attention_forward(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    y_one, p_one = fused.causal_attention_forward(qkv[2:3, :, 0], qkv[2:3, :, 1], qkv[2:3, :, 2])
    assert p_all[2:3].tobytes() == p_one.tobytes() and y_all[2:3].tobytes() == y_one.tobytes()
    targets = np.arange(4 * 37).reshape(4, 37) % 37
    probs_all = fused.cross_entropy_forward(scores.copy(), targets, 1)[1]
    probs_one = fused.cross_entropy_forward(scores[1:2].copy(), targets[1:2], 1)[1]
    assert probs_all[1:2].tobytes() == probs_one.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_model_on_either_set_computes_the_same_loss_and_gradients(dtype):
    config = ModelConfig(layers=2, d_model=32, heads=4, context=70, dtype=dtype)  # T > one query block
    tokens, targets = BatchSampler(lecture_bytes(), config.context, 3, seed=2).rank_batch(0)
    runs = {}
    for name in KERNELS:
        model = Transformer(config, seed=1, kernels=name)
        loss = model.forward(tokens, targets)
        model.backward()
        runs[name] = loss, model.grads, model.logits(tokens)
    (l1, g1, z1), (l2, g2, z2) = runs.values()
    assert l1 == pytest.approx(l2, rel=TOL[dtype]) and close(g1, g2, dtype) and close(z1, z2, dtype)


def test_bad_arrays_are_refused_before_any_work():
    import _playground_native as C

    x = np.zeros((2, 4), np.float32)
    with pytest.raises(TypeError, match="float32 or float64"):
        C.gelu_forward(x.astype(np.int32), x, x)
    with pytest.raises(TypeError, match="same dtype"):
        C.gelu_forward(x, x.astype(np.float64), x)
    with pytest.raises(ValueError, match="alike"):
        C.gelu_forward(x, x[:1], x)
    with pytest.raises(IndexError, match="target 256 of row 1"):
        fused.cross_entropy_forward(np.zeros((2, 256)), np.array([0, 256]), 2)
    with pytest.raises(ValueError, match="contiguous"):
        C.adam_step(x.T, x, x, x, 0.9, 0.95, 1e-8, 1e-3, 1.0)


def test_kernels_are_chosen_by_name_or_environment(monkeypatch):
    assert get_kernels("numpy") is KERNELS["numpy"] and get_kernels().name == "native"
    monkeypatch.setenv(ENVIRONMENT, "numpy")
    assert Transformer(ModelConfig(), seed=0).kernels.name == "numpy"
    monkeypatch.setenv(ENVIRONMENT, "blas")
    with pytest.raises(
        UsageError, match=r"unknown kernels 'blas' \(PLAYGROUND_KERNELS\); allowed: native, numpy"
    ):
        get_kernels()
