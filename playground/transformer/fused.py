"""The native twin of layers.py: the same functions, each one pass of native/transformer.c where numpy
makes one pass per operation, and the matrix products through the BLAS native/gemm.c is bound to
(blas.py: MKL if installed, else numpy's own OpenBLAS), a linear layer's bias and residual added
by the product itself.

Each function has layers.py's signature and contract and is tested against it
(tests/test_transformer_kernels.py): layernorm, GELU's algebra, the loss's gradient, the embedding's
gradient and Adam give numpy's bits exactly; softmax, cross-entropy and GELU's tanh use the C file's
own exp, and the products another BLAS or another order of additions (agreeing to rounding).
Differences in how they treat their arguments, all documented where they apply:
`cross_entropy_forward` turns the logits into the probabilities in place and `cross_entropy_backward`
the probabilities into the gradient (the model never reads either again), and attention writes y
and the input gradients straight into the layouts the model wants (no transposing copies).
"""

import math

import numpy as np

from playground.core.native import load_native
from playground.transformer import layers
from playground.transformer.blas import bound_blas
from playground.transformer.layers import LAYERNORM_EPS, flat_rows

_C = load_native()


def matmul(a, b, out=None):
    """a @ b through the bound BLAS, into `out` if given (layers.matmul): 2-d, or a batch of
    matrices alike in both (attention's); a (..., k) with a 2-d b as one (rows, k) matrix. numpy's
    matmul where the BLAS cannot read the views in place."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous and (out is None or out.flags.c_contiguous):
        res = matmul(flat_rows(a), b, None if out is None else flat_rows(out))
        return res.reshape(*a.shape[:-1], b.shape[1]) if out is None else out
    if out is None:
        out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=np.result_type(a, b))
    if bound_blas() is None or not _C.matmul(a, b, out):
        np.matmul(a, b, out=out)
    return out


def linear_forward(x, weight, bias, residual=None):
    """layers.linear_forward in one pass over the output: it is filled with the bias (and the
    residual) and the BLAS adds the product to it (beta = 1)."""
    out = np.empty((*x.shape[:-1], weight.shape[1]), dtype=x.dtype)
    res = None if residual is None else np.ascontiguousarray(residual)
    if bound_blas() is None or not _C.linear_forward(np.ascontiguousarray(x), weight, bias, res, out):
        return layers.linear_forward(x, weight, bias, residual)
    return out


def linear_backward(dout, x, weight, dweight, dbias):
    dout2 = flat_rows(dout)
    np.sum(dout2, axis=0, out=dbias)
    matmul(flat_rows(x).T, dout2, out=dweight)
    return matmul(dout, weight.T)


def layernorm_forward(x, weight, bias):
    out, xhat = np.empty_like(x), np.empty_like(x)
    rstd = np.empty((*x.shape[:-1], 1), dtype=x.dtype)
    _C.layernorm_forward(np.ascontiguousarray(x), weight, bias, out, xhat, rstd, LAYERNORM_EPS)
    return out, (xhat, rstd)


def layernorm_backward(dout, saved, weight, dweight, dbias, residual=None, out=None):
    xhat, rstd = saved
    dx = np.empty_like(xhat) if out is None else out
    _C.layernorm_backward(np.ascontiguousarray(dout), xhat, rstd, weight, dweight, dbias, dx, residual)
    return dx


def gelu_forward(x):
    out, t = np.empty_like(x), np.empty_like(x)
    _C.gelu_forward(x, out, t)
    return out, t


def gelu_backward(dout, x, t, out=None):
    dx = np.empty_like(x) if out is None else out
    _C.gelu_backward(dout, x, t, dx)
    return dx


QUERY_BLOCK = 64  # queries per block of the causal products (see `_blocks`)


def _blocks(T: int) -> list[tuple[int, int]]:
    """The causal products by blocks of queries: block [a, b) needs keys [0, b) only, so that
    with blocks of T/2 a product does 3/4 of the full T x T work, with T/4 5/8 (the work above the
    diagonal is zeros that numpy's reference multiplies out)."""
    size = QUERY_BLOCK if T > QUERY_BLOCK else T
    return [(a, min(a + size, T)) for a in range(0, T, size)]


def causal_attention_forward(q, k, v):
    """layers.causal_attention_forward: y (B, T, H, hd) contiguous, probs (B, H, T, T)."""
    B, T, H, hd = q.shape
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, hd) views
    kt = k.transpose(0, 1, 3, 2)
    probs = np.empty((B, H, T, T), dtype=q.dtype)  # above the diagonal: written 0 by the softmax
    for a, b in _blocks(T):
        matmul(q[:, :, a:b], kt[:, :, :, :b], out=probs[:, :, a:b, :b])
    _C.causal_softmax_forward(probs, T, 1 / math.sqrt(hd))
    y = np.empty((B, T, H, hd), dtype=q.dtype)
    yt = y.transpose(0, 2, 1, 3)
    for a, b in _blocks(T):
        matmul(probs[:, :, a:b, :b], v[:, :, :b], out=yt[:, :, a:b])
    return y, probs


def causal_attention_backward(dy, q, k, v, probs, out=None):
    """layers.causal_attention_backward; `out` = (dq, dk, dv) views to write them into (the model
    passes the split of one (B, T, 3 d) array, so that it needs no concatenation)."""
    B, T, H, hd = q.shape
    dq, dk, dv = out if out is not None else (np.empty_like(q), np.empty_like(k), np.empty_like(v))
    dy, q, k, v, dq, dk, dv = (a.transpose(0, 2, 1, 3) for a in (dy, q, k, v, dq, dk, dv))
    blocks, probs_t = _blocks(T), probs.transpose(0, 1, 3, 2)
    dscores = np.empty_like(probs)  # d probs, then in place d scores
    vt = v.transpose(0, 1, 3, 2)
    for a, b in blocks:
        matmul(dy[:, :, a:b], vt[:, :, :, :b], out=dscores[:, :, a:b, :b])
        matmul(probs_t[:, :, a:b, a:], dy[:, :, a:], out=dv[:, :, a:b])  # keys [a, b): queries from a
    _C.causal_softmax_backward(dscores, probs, T, 1 / math.sqrt(hd))
    dscores_t = dscores.transpose(0, 1, 3, 2)
    for a, b in blocks:
        matmul(dscores[:, :, a:b, :b], k[:, :, :b], out=dq[:, :, a:b])
        matmul(dscores_t[:, :, a:b, a:], q[:, :, a:], out=dk[:, :, a:b])
    return tuple(a.transpose(0, 2, 1, 3) for a in (dq, dk, dv))


def cross_entropy_forward(logits, targets, denominator: int):
    """layers.cross_entropy_forward, with `logits` turned into the probabilities in place (if it is
    contiguous; else a contiguous copy is)."""
    probs = np.ascontiguousarray(logits)
    total = _C.cross_entropy_forward(probs, _int64(targets))
    return total / denominator, probs


def cross_entropy_backward(probs, targets, denominator: int):
    """layers.cross_entropy_backward, in place: `probs` (contiguous) becomes the gradient."""
    dlogits = np.ascontiguousarray(probs)
    _C.cross_entropy_backward(dlogits, _int64(targets), float(denominator))
    return dlogits


def embedding_backward(dwte, tokens, dx):
    _C.embedding_backward(dwte, _int64(tokens), np.ascontiguousarray(dx))


def adam_step(params, grads, m, v, beta1, beta2, eps, step_size, sqrt_bias2):
    _C.adam_step(params, grads, m, v, beta1, beta2, eps, step_size, sqrt_bias2)


def kernel_isa() -> str:
    """The vector instructions the kernels run with on this CPU: avx512f, avx2 or baseline."""
    return _C.kernel_isa()


def _int64(a):
    return np.ascontiguousarray(a, dtype=np.int64)
