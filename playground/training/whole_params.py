"""What a gradient strategy that keeps every parameter on every rank answers alike (the replicated
modes' `reducer.AllReduceBuckets` and ZeRO-1's `zero.ZeroOne`): its parameters are the model's own
flat buffer, the same bits on every rank of the data group after every step, so the checks hash it,
a copy of it is the model, and the model's trace spans need nothing from it. ZeRO-2 and ZeRO-3
(`sharded`) answer the same questions otherwise.
"""

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from playground.training.checks import check_params

Span = Callable[[str], AbstractContextManager]


class WholeParams:
    """Mixin: needs `comm`, `params`, `grads` (flat, the model's), `optimizer` (an `Adam`)."""

    comm: Any
    params: np.ndarray
    grads: np.ndarray
    optimizer: Any
    # each micro-batch's gradients add up in a local buffer; the reduction runs once per step
    reduces_every_micro_batch = False

    @property
    def waited_s(self) -> dict[str, float]:
        """What forward and backward waited for (ZeRO-3's gathers): nothing here."""
        return {"forward": 0.0, "backward": 0.0}

    def unit_span(self, span: Span) -> Span:
        """The model's spans as they are: nothing to gather before a piece computes."""
        return span

    def agree_params(self, step: int, mode: str) -> str:
        """The data group's hashes of the parameters compared (`checks.check_params`); this rank's."""
        return check_params(self.comm, step, self.params, mode)

    def full_params(self) -> np.ndarray:
        """A copy of every parameter this rank's model part holds (the model's buffer)."""
        return self.params.copy()

    def held(self, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """The values this rank holds of the flat buffer's element `ranges`: all of them."""
        return np.concatenate([self.params[a:b] for a, b in ranges]) if ranges else self.params[:0].copy()

    def memory(self) -> dict:
        """The model state this rank keeps (bytes); nothing gathered or freed during a step."""
        return {
            "params_bytes": int(self.params.nbytes),
            "grads_bytes": int(self.grads.nbytes),
            "optimizer_bytes": int(self.optimizer.state_bytes),
            "peak_param_units": 0,
            "peak_param_unit_bytes": 0,
            "peak_grad_units": 0,
            "peak_grad_unit_bytes": 0,
        }

    @property
    def state_bytes(self) -> int:
        return int(self.optimizer.state_bytes)
