"""One expert: the dense block's MLP (d -> 4d, GELU, 4d -> d) over the rows routed to it, forward and
backward, from layers.py's pieces. Its weights are slice e of the block's stacked expert parameters
(E/P, ...); its gradients are written (not added) into slice e of theirs, so an expert that received no
row this step writes zeros, as a dense layer's backward over no tokens would.
"""

from typing import NamedTuple

import numpy as np

from playground.transformer.layers import gelu_backward, gelu_forward, linear_backward, linear_forward


class ExpertSaved(NamedTuple):
    x: np.ndarray
    fc_out: np.ndarray
    gelu_tanh: np.ndarray
    gelu_out: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self)


def expert_forward(x, w_fc, b_fc, w_proj, b_proj) -> tuple[np.ndarray, ExpertSaved]:
    """x (rows, d) -> y (rows, d) and what backward needs."""
    fc_out = linear_forward(x, w_fc, b_fc)
    gelu_out, gelu_tanh = gelu_forward(fc_out)
    return linear_forward(gelu_out, w_proj, b_proj), ExpertSaved(x, fc_out, gelu_tanh, gelu_out)


def expert_backward(dy, s: ExpertSaved, w_fc, w_proj, dw_fc, db_fc, dw_proj, db_proj) -> np.ndarray:
    """dy (rows, d) -> dx (rows, d); the expert's four gradients written into the `d*` arrays."""
    dgelu = linear_backward(dy, s.gelu_out, w_proj, dw_proj, db_proj)
    dfc = gelu_backward(dgelu, s.fc_out, s.gelu_tanh)
    return linear_backward(dfc, s.x, w_fc, dw_fc, db_fc)
