"""The pieces of the model, forward and backward by hand (as llm.c writes them), numpy only: the
readable reference. fused.py is their native twin (one pass of native/transformer.c each), with the
same signatures; kernels.py picks one set for a model.

Each `*_forward` returns its output and what its backward needs; each `*_backward` takes the
gradient of the output and returns the gradient of the input, writing parameter gradients into
the `out=` arrays it is given (views of the flat gradient buffer), never allocating them. Every
function works on any leading shape (a batch of sequences (B, T, ...) or packed tokens (N, ...)),
so training and decoding run the same code. No Python loop over tokens or heads. Where a result
can be computed in place on a temporary it is (`out=`, `*=`): each numpy operation is a pass over
its array, and a new array of activation size is a page fault per 4 KiB the first time.

Numerics: softmax and cross-entropy subtract the row maximum before exp (no overflow; exp of
the masked -inf is exactly 0); layernorm normalises with the centred variance (not E[x^2] -
E[x]^2, which cancels catastrophically) and its backward is the closed form
dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
"""

import math
from functools import cache

import numpy as np

LAYERNORM_EPS = 1e-5  # GPT-2's
GELU_C = math.sqrt(2 / math.pi)
GELU_A = 0.044715


def layernorm_forward(x, weight, bias):
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(var + LAYERNORM_EPS)
    xhat = xc * rstd
    return xhat * weight + bias, (xhat, rstd)


def layernorm_backward(dout, saved, weight, dweight, dbias, residual=None, out=None):
    """The input's gradient, plus `residual` if given (the skip connection around the layernorm's
    block: the block's input gradient is the sum of both), into `out` if given."""
    xhat, rstd = saved
    dout2, xhat2 = flat_rows(dout), flat_rows(xhat)
    np.sum(dout2, axis=0, out=dbias)
    np.sum(dout2 * xhat2, axis=0, out=dweight)
    dxhat = dout * weight
    mean_dxhat = dxhat.mean(axis=-1, keepdims=True)
    mean_dxhat_xhat = (dxhat * xhat).mean(axis=-1, keepdims=True)
    dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)
    if residual is not None:
        return np.add(residual, dx, out=out)
    if out is not None:
        out[...] = dx
        return out
    return dx


def matmul(a, b, out=None):
    """a @ b (numpy's, its BLAS), into `out` if given."""
    return np.matmul(a, b, out=out)


def linear_forward(x, weight, bias, residual=None):
    """x (..., in) @ weight (in, out) + bias (out,), plus `residual` (..., out) if given (a block's
    skip connection around the layer)."""
    out = x @ weight
    out += bias
    if residual is not None:
        out += residual
    return out


def linear_backward(dout, x, weight, dweight, dbias):
    dout2 = flat_rows(dout)
    np.sum(dout2, axis=0, out=dbias)
    np.matmul(flat_rows(x).T, dout2, out=dweight)
    return dout @ weight.T


def gelu_forward(x):
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(c (x + a x^3))). Returns it and the
    tanh, which backward needs. In place on one temporary (this is the widest activation, 4 d)."""
    t = x * x
    t *= GELU_A * x
    t += x
    t *= GELU_C
    np.tanh(t, out=t)
    out = t + 1
    out *= 0.5 * x
    return out, t


def gelu_backward(dout, x, t, out=None):
    """dout * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)), t = the forward's tanh; into `out`
    if given (it may be `dout`)."""
    slope = x * x
    slope *= 3 * GELU_A
    slope += 1
    slope *= GELU_C * 0.5
    slope *= x
    slope *= 1 - t * t
    slope += 0.5 * (1 + t)
    return np.multiply(slope, dout, out=out if out is not None else slope)


def softmax(scores, axis=-1):
    e = np.exp(scores - scores.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


@cache
def causal_mask(T: int, dtype: str) -> np.ndarray:
    """(T, T): 0 on and below the diagonal, -inf above (the future: exp(-inf) = 0). Read-only, one
    per size."""
    mask = np.triu(np.full((T, T), -np.inf, dtype=dtype), 1)
    mask.flags.writeable = False
    return mask


def causal_attention_forward(q, k, v):
    """q, k, v (B, T, H, hd) -> y (B, T, H, hd): each position attends to itself and the ones
    before it, softmax(q k^T / sqrt(hd)) v per head. Returns y and the probabilities (B, H, T, T)."""
    B, T, H, hd = q.shape
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, hd)
    scores = q @ k.transpose(0, 1, 3, 2)
    scores *= 1 / math.sqrt(hd)
    scores += causal_mask(T, scores.dtype.name)
    probs = softmax(scores)
    y = np.empty((B, T, H, hd), dtype=q.dtype)
    np.matmul(probs, v, out=y.transpose(0, 2, 1, 3))  # straight into (B, T, H, hd): no copy
    return y, probs


def causal_attention_backward(dy, q, k, v, probs, out=None):
    """Gradients of q, k, v (B, T, H, hd) from dy (B, T, H, hd); into `out` = (dq, dk, dv) if given
    (the model passes the three parts of one array, which then needs no concatenation)."""
    scale = 1 / math.sqrt(q.shape[-1])
    dq, dk, dv = out if out is not None else (np.empty_like(q), np.empty_like(k), np.empty_like(v))
    dy, q, k, v, dq, dk, dv = (a.transpose(0, 2, 1, 3) for a in (dy, q, k, v, dq, dk, dv))
    dprobs = dy @ v.transpose(0, 1, 3, 2)
    np.matmul(probs.transpose(0, 1, 3, 2), dy, out=dv)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))  # softmax backward
    dscores *= scale
    np.matmul(dscores, k, out=dq)
    np.matmul(dscores.transpose(0, 1, 3, 2), q, out=dk)
    return tuple(a.transpose(0, 2, 1, 3) for a in (dq, dk, dv))


def cross_entropy_forward(logits, targets, denominator: int):
    """sum over tokens of -log softmax(logits)[target], divided by `denominator` (the number of
    tokens the mean is over: this batch's, or the global batch's when this is one rank's slice).
    Returns the loss (a float) and the probabilities its backward needs."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    sum_exp = exp.sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(shifted, targets[..., None], axis=-1)
    nll = np.log(sum_exp) - picked
    exp /= sum_exp
    return float(nll.sum(dtype=np.float64)) / denominator, exp


def cross_entropy_backward(probs, targets, denominator: int):
    """d loss / d logits = (softmax - one_hot(target)) / denominator."""
    dlogits = probs.copy()
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(probs, targets[..., None], -1) - 1, -1)
    dlogits /= denominator
    return dlogits


def embedding_backward(dwte, tokens, dx):
    """dwte[tokens[i]] += dx[i] for every token, repeats included (np.add.at adds each in turn)."""
    np.add.at(dwte, np.ravel(tokens), flat_rows(dx))


def adam_step(params, grads, m, v, beta1, beta2, eps, step_size, sqrt_bias2):
    """One Adam update in place (optim.py's formula; step_size and sqrt_bias2 carry the bias
    corrections): m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    params -= step_size * m / (sqrt(v) / sqrt_bias2 + eps)."""
    m *= beta1
    m += (1 - beta1) * grads
    v *= beta2
    v += (1 - beta2) * (grads * grads)
    update = np.sqrt(v)
    update /= sqrt_bias2
    update += eps
    np.divide(m, update, out=update)
    update *= step_size
    params -= update


def flat_rows(a):
    """(..., n) -> (rows, n) without copying a contiguous array."""
    return a.reshape(-1, a.shape[-1])
