"""Which code computes the model's pieces: `numpy` (layers.py, the readable reference) or `native`
(fused.py: one pass of native/transformer.c per piece, the default). One table, `KERNELS`; a
`Transformer` and an `Adam` take a name from it (or a `Kernels` of one's own: a timed copy is how
`profile.profile_steps` sees where a step's time goes).

The matrix products are a BLAS's in both: numpy's matmul in the reference; in the native set the
CBLAS gemm native/gemm.c is bound to (blas.py: MKL if installed, else numpy's own), which also adds
a linear layer's bias and residual in the same pass. The rest is where the two differ: numpy runs
GELU's forward as eight passes over the widest activation and Adam as fourteen over the model,
the attention's softmax over the masked half too; the native set makes each one pass. Both are
tested equal (tests/test_transformer_kernels.py), bit for bit where the arithmetic is only
additions, products, divisions and square roots in the same order, to rounding where it takes exp
or tanh or another BLAS.

PLAYGROUND_KERNELS=numpy makes `numpy` every model's default (an A/B of a whole run).
"""

import os
from collections.abc import Callable
from typing import NamedTuple

from playground.core.errors import UsageError
from playground.transformer import fused, layers

ENVIRONMENT = "PLAYGROUND_KERNELS"


class Kernels(NamedTuple):
    """One implementation of each piece the model calls, by layers.py's names and signatures.
    `matmul` is every product outside attention and the linear layers (the head's, the two c_proj's
    whose sum a tensor-parallel rank completes before the bias)."""

    name: str
    linear_forward: Callable
    linear_backward: Callable
    matmul: Callable
    layernorm_forward: Callable
    layernorm_backward: Callable
    gelu_forward: Callable
    gelu_backward: Callable
    causal_attention_forward: Callable
    causal_attention_backward: Callable
    cross_entropy_forward: Callable
    cross_entropy_backward: Callable
    embedding_backward: Callable
    adam_step: Callable


PIECES = Kernels._fields[1:]


def _of(name: str, module) -> Kernels:
    return Kernels(name, *(getattr(module, piece) for piece in PIECES))


KERNELS: dict[str, Kernels] = {"native": _of("native", fused), "numpy": _of("numpy", layers)}


def default_kernels() -> str:
    """PLAYGROUND_KERNELS if set, else native."""
    return os.environ.get(ENVIRONMENT) or "native"


def get_kernels(kernels: "str | Kernels | None" = None) -> Kernels:
    """The named set (None: `default_kernels()`), or `kernels` itself if it is one."""
    if isinstance(kernels, Kernels):
        return kernels
    name = kernels or default_kernels()
    if name not in KERNELS:
        where = f" ({ENVIRONMENT})" if kernels is None else ""
        raise UsageError(f"unknown kernels {name!r}{where}; allowed: {', '.join(KERNELS)}", field="kernels")
    return KERNELS[name]
