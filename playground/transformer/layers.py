"""The pieces of the model, forward and backward by hand (as llm.c writes them), numpy only.

Each `*_forward` returns its output and what its backward needs; each `*_backward` takes the
gradient of the output and returns the gradient of the input, writing parameter gradients into
the `out=` arrays it is given (views of the flat gradient buffer), never allocating them. Every
function works on any leading shape (a batch of sequences (B, T, ...) or packed tokens (N, ...)),
so training and decoding run the same code. No Python loop over tokens or heads.

Numerics: softmax and cross-entropy subtract the row maximum before exp (no overflow; exp of
the masked -inf is exactly 0); layernorm normalises with the centred variance (not E[x^2] -
E[x]^2, which cancels catastrophically) and its backward is the closed form
dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
"""

import math

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


def layernorm_backward(dout, saved, weight, dweight, dbias):
    xhat, rstd = saved
    dout2, xhat2 = flat_rows(dout), flat_rows(xhat)
    np.sum(dout2, axis=0, out=dbias)
    np.sum(dout2 * xhat2, axis=0, out=dweight)
    dxhat = dout * weight
    mean_dxhat = dxhat.mean(axis=-1, keepdims=True)
    mean_dxhat_xhat = (dxhat * xhat).mean(axis=-1, keepdims=True)
    return rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)


def linear_forward(x, weight, bias):
    """x (..., in) @ weight (in, out) + bias (out,)."""
    return x @ weight + bias


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


def gelu_backward(dout, x, t):
    """dout * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)), t = the forward's tanh."""
    slope = x * x
    slope *= 3 * GELU_A
    slope += 1
    slope *= GELU_C * 0.5
    slope *= x
    slope *= 1 - t * t
    slope += 0.5 * (1 + t)
    slope *= dout
    return slope


def softmax(scores, axis=-1):
    e = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def causal_attention_forward(q, k, v):
    """q, k, v (B, T, H, hd) -> y (B, T, H, hd): each position attends to itself and the ones
    before it, softmax(q k^T / sqrt(hd)) v per head. Returns y and the probabilities (B, H, T, T)."""
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, hd)
    T = q.shape[2]
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1 / math.sqrt(q.shape[-1]))
    scores += np.triu(np.full((T, T), -np.inf, dtype=scores.dtype), 1)  # the future: exp(-inf) = 0
    probs = softmax(scores)
    return (probs @ v).transpose(0, 2, 1, 3), probs


def causal_attention_backward(dy, q, k, v, probs):
    """Gradients of q, k, v (B, T, H, hd) from dy (B, T, H, hd)."""
    dy, q, k, v = (a.transpose(0, 2, 1, 3) for a in (dy, q, k, v))
    scale = 1 / math.sqrt(q.shape[-1])
    dprobs = dy @ v.transpose(0, 1, 3, 2)
    dv = probs.transpose(0, 1, 3, 2) @ dy
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))  # softmax backward
    dscores *= scale
    dq = dscores @ k
    dk = dscores.transpose(0, 1, 3, 2) @ q
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
    return float(nll.sum(dtype=np.float64)) / denominator, exp / sum_exp


def cross_entropy_backward(probs, targets, denominator: int):
    """d loss / d logits = (softmax - one_hot(target)) / denominator."""
    dlogits = probs.copy()
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(probs, targets[..., None], -1) - 1, -1)
    dlogits /= denominator
    return dlogits


def flat_rows(a):
    """(..., n) -> (rows, n) without copying a contiguous array."""
    return a.reshape(-1, a.shape[-1])
