"""What a forward keeps for its backward: each block's saved arrays, attention's q, k, v and
probabilities, and a stage's whole record of one micro-batch (`Activations`), whose `nbytes` is the
activation memory a pipeline schedule multiplies (`plan.StagePlan.activation_bytes` is its formula).
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from playground.transformer.kernels import Kernels, get_kernels


class BlockSaved(NamedTuple):
    """What a block's backward needs from its forward (a block of experts: `experts`, the MoE layer's
    record, in place of the MLP's three arrays)."""

    ln_1: tuple
    ln_1_out: np.ndarray
    attn_y: np.ndarray
    ln_2: tuple
    ln_2_out: np.ndarray
    fc_out: np.ndarray | None
    gelu_tanh: np.ndarray | None
    gelu_out: np.ndarray | None
    experts: Any = None  # moe.layer.MoESaved


class CausalAttention:
    """Training's `attend`: full causal attention within each sequence of a (B, T) batch, keeping
    q, k, v and the probabilities for backward if `keep`; computed by `kernels` (kernels.py)."""

    def __init__(self, keep: bool = True, kernels: str | Kernels | None = None):
        self.keep = keep
        self.kernels = get_kernels(kernels)
        self.saved: dict[int, tuple] = {}

    def __call__(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        y, probs = self.kernels.causal_attention_forward(q, k, v)
        if self.keep:
            self.saved[layer] = (q, k, v, probs)
        return y

    def backward(
        self, layer: int, dy: np.ndarray, out: tuple | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """dq, dk, dv (into `out`'s three arrays if given) of the forward's layer `layer`."""
        return self.kernels.causal_attention_backward(dy, *self.saved.pop(layer), out=out)


@dataclass
class Activations:
    """What one forward of a stage keeps for its backward: the tokens (first stage), each block's
    `BlockSaved` and attention's q, k, v and probabilities, and the head's (last stage)."""

    tokens: np.ndarray | None
    targets: np.ndarray | None
    denominator: int
    attention: CausalAttention
    blocks: list[BlockSaved]
    head: tuple | None  # (xf, ln_f's saved, probs)

    @property
    def nbytes(self) -> int:
        """The bytes of every array held, each counted by its own size (q, k and v are views of
        one (.., 3 d) array and count as it does): `plan.StagePlan.activation_bytes`."""
        arrays = [a for a in (self.tokens, self.targets) if a is not None]
        extra = 0
        for block in self.blocks:
            arrays += [block.ln_1[0], block.ln_1[1], block.ln_1_out, block.attn_y, block.ln_2[0]]
            arrays += [
                a
                for a in (block.ln_2[1], block.ln_2_out, block.fc_out, block.gelu_tanh, block.gelu_out)
                if a is not None
            ]
            extra += block.experts.nbytes if block.experts is not None else 0
        for saved in self.attention.saved.values():
            arrays += list(saved)
        if self.head is not None:
            xf, (xhat, rstd), probs = self.head
            arrays += [xf, xhat, rstd, probs]
        return sum(a.nbytes for a in arrays) + extra
