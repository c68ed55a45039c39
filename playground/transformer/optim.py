"""Adam over any slice of the flat buffers: the whole model, or one ZeRO-1 shard.

    m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2          (t = steps taken, from 1)
    p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

written as torch.optim.Adam computes it (bias corrections on the step size and on sqrt(v)), with
nanoGPT's betas (0.9, 0.95) and torch's eps 1e-8. No weight decay: nanoGPT's AdamW decays only
the matrices, which would need a per-element mask over the flat buffer, and a small model
trained for a few hundred steps gains nothing from it.

Every operation is elementwise, so an element's update depends only on its own p, g, m, v and the
step count: updating the whole buffer at once and updating it shard by shard (ZeRO-1: each rank
steps its 1/N slice and keeps m, v of that slice only) give bit-identical parameters.

`LRSchedule` is nanoGPT's: a linear warm-up from lr / warmup_steps to lr, then a cosine decay to
`min_lr` at the last step (or a constant lr without `min_lr`). In the same number of steps, a
small model reaches a clearly lower loss with it than at a constant rate: the warm-up lets a high
rate start without a first jump, the decay settles what that rate found.
"""

import math
from dataclasses import dataclass

import numpy as np

from playground.core.errors import ParamError, UsageError
from playground.transformer.kernels import Kernels, get_kernels


@dataclass(frozen=True)
class AdamConfig:
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8

    def __post_init__(self):
        if not self.lr > 0:
            raise ParamError("lr", f"must be > 0, got {self.lr}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ParamError(name, f"must be in [0, 1), got {getattr(self, name)}")
        if not self.eps > 0:
            raise ParamError("eps", f"must be > 0, got {self.eps}")


@dataclass(frozen=True)
class LRSchedule:
    """The learning rate of step `step` (0-based) of a run of `steps` steps (see the module doc)."""

    lr: float
    steps: int
    warmup_steps: int = 0
    min_lr: float | None = None  # None: constant after the warm-up

    def __post_init__(self):
        if not self.lr > 0:
            raise ParamError("lr", f"must be > 0, got {self.lr}")
        if self.warmup_steps < 0:
            raise ParamError("warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise ParamError("min_lr", f"must be in [0, lr={self.lr}] or null, got {self.min_lr}")

    def lr_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.min_lr is None:
            return self.lr
        decay_steps = self.steps - 1 - self.warmup_steps
        progress = (step - self.warmup_steps) / decay_steps if decay_steps > 0 else 1.0
        return self.min_lr + 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))) * (self.lr - self.min_lr)

    def to_dict(self) -> dict:
        return {"lr": self.lr, "steps": self.steps, "warmup_steps": self.warmup_steps, "min_lr": self.min_lr}


class Adam:
    """Adam's state (m, v, steps taken) for `num_elements` parameters of `dtype`; the update is
    computed by `kernels` (kernels.py: native, one pass over the four arrays, or numpy's reference;
    the same bits)."""

    def __init__(
        self, num_elements: int, dtype, config: AdamConfig | None = None, kernels: str | Kernels | None = None
    ):
        self.config = config or AdamConfig()
        self.kernels = get_kernels(kernels)
        self.m = np.zeros(num_elements, dtype=dtype)
        self.v = np.zeros(num_elements, dtype=dtype)
        self.steps = 0

    @property
    def state_bytes(self) -> int:
        return self.m.nbytes + self.v.nbytes

    def state(self) -> dict[str, np.ndarray]:
        """m, v and the steps taken (views, not copies): what a checkpoint keeps of it."""
        return {"m": self.m, "v": self.v, "steps": np.array(self.steps, dtype=np.int64)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Go on from `state` (`state()`'s): the next step is then bit for bit the one it would take."""
        for name in ("m", "v"):
            if state[name].shape != self.m.shape or state[name].dtype != self.m.dtype:
                raise UsageError(
                    f"Adam's {name} must be {self.m.dtype} {self.m.shape}, got {state[name].dtype} {state[name].shape}"
                )
        self.m[:], self.v[:] = state["m"], state["v"]
        self.steps = int(state["steps"])

    def step(self, params: np.ndarray, grads: np.ndarray, lr: float | None = None) -> None:
        """Update `params` in place from `grads` (1-d, this optimizer's length); `lr` overrides the
        configured rate for this step (a schedule)."""
        if params.shape != self.m.shape or grads.shape != self.m.shape:
            raise UsageError(f"params and grads must be {self.m.shape}, got {params.shape} and {grads.shape}")
        c = self.config
        self.steps += 1
        step_size = (c.lr if lr is None else lr) / (1 - c.beta1**self.steps)
        sqrt_bias2 = math.sqrt(1 - c.beta2**self.steps)
        self.kernels.adam_step(params, grads, self.m, self.v, c.beta1, c.beta2, c.eps, step_size, sqrt_bias2)
