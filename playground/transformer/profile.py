"""Where a training step's time goes, piece by piece: every kernel the model calls, timed.

`timed(kernels)` is a copy of a kernel set (kernels.py) whose every function records, per call,
its seconds, the floating-point operations it does and the bytes of the arrays it reads and
writes (its arguments and results); `profile_steps` runs forward + backward (and Adam) on it and
sums them by `GROUP`: the matrix products, attention, layer norm, GELU, the loss, the embedding's
gradient, the optimizer, and "other", the rest of forward + backward (the embedding's gather, the
residual adds, Python). The recording costs about a microsecond a call (some 60 calls a step of
train-modes: under 1% of its smallest step).

FLOPs are the model's (what a product does, 2 m n k; attention as the full T x T it stands for,
as model-FLOPs utilisation counts it), so a rate against the machine's matrix-multiply rate says
how far each piece is from the only ceiling that matters for the products; the other pieces do
next to no arithmetic, and their bytes over the copy bandwidth are their bound (a roofline).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from playground.transformer.config import ModelConfig
from playground.transformer.kernels import PIECES, Kernels, get_kernels
from playground.transformer.model import Transformer
from playground.transformer.optim import Adam

GROUP = {
    "linear_forward": "matmul",
    "linear_backward": "matmul",
    "matmul": "matmul",
    "causal_attention_forward": "attention",
    "causal_attention_backward": "attention",
    "layernorm_forward": "layernorm",
    "layernorm_backward": "layernorm",
    "gelu_forward": "gelu",
    "gelu_backward": "gelu",
    "cross_entropy_forward": "loss",
    "cross_entropy_backward": "loss",
    "embedding_backward": "embedding",
    "adam_step": "optimizer",
}
GROUPS = ("matmul", "attention", "layernorm", "gelu", "loss", "embedding", "other")  # forward + backward


def _rows(a) -> int:
    return int(np.prod(a.shape[:-1]))


def _flops(piece: str, args: tuple) -> float:
    """The model FLOPs of one call (0 for the pieces that do next to none)."""
    if piece == "linear_forward":
        x, w = args[0], args[1]
        return 2.0 * _rows(x) * w.shape[0] * w.shape[1]
    if piece == "linear_backward":
        w = args[2]
        return 4.0 * _rows(args[0]) * w.shape[0] * w.shape[1]  # the weight's gradient and the input's
    if piece == "matmul":
        a, b = args[0], args[1]
        return 2.0 * _rows(a) * a.shape[-1] * b.shape[-1]
    if piece.startswith("causal_attention"):
        B, T, H, hd = args[1].shape if piece.endswith("backward") else args[0].shape
        products = 2 if piece.endswith("forward") else 4  # q k^T, p v; and d p, d v, d q, d k
        return products * 2.0 * B * H * T * T * hd
    return 0.0


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    return 0


@dataclass
class PieceTotals:
    calls: int = 0
    seconds: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0


@dataclass
class Recorder:
    """Totals per kernel piece since the last `reset`."""

    pieces: dict[str, PieceTotals] = field(default_factory=dict)

    def reset(self) -> None:
        self.pieces.clear()

    def add(self, piece: str, seconds: float, flops: float, nbytes: int) -> None:
        t = self.pieces.setdefault(piece, PieceTotals())
        t.calls += 1
        t.seconds += seconds
        t.flops += flops
        t.bytes += nbytes

    def by_group(self) -> dict[str, PieceTotals]:
        out: dict[str, PieceTotals] = {}
        for piece, t in self.pieces.items():
            g = out.setdefault(GROUP[piece], PieceTotals())
            g.calls, g.seconds, g.flops, g.bytes = (
                g.calls + t.calls,
                g.seconds + t.seconds,
                g.flops + t.flops,
                g.bytes + t.bytes,
            )
        return out


def timed(kernels: Kernels, recorder: Recorder) -> Kernels:
    """`kernels` with every piece timed into `recorder`."""

    def wrap(piece: str, fn: Callable) -> Callable:
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            seconds = time.perf_counter() - t0
            recorder.add(piece, seconds, _flops(piece, args), _nbytes(args) + _nbytes(result))
            return result

        return call

    return Kernels(kernels.name, *(wrap(piece, getattr(kernels, piece)) for piece in PIECES))


@dataclass(frozen=True)
class StepProfile:
    """Per step: forward + backward's seconds, each group's totals (GROUPS, "other" the rest of
    forward + backward: its calls, flops and bytes are 0) and the optimizer's."""

    forward_backward_s: float
    groups: dict[str, PieceTotals]
    optimizer: PieceTotals

    @property
    def flops(self) -> float:
        return sum(g.flops for g in self.groups.values())

    def to_dict(self) -> dict:
        return {
            "forward_backward_s": self.forward_backward_s,
            "groups": {name: vars(g) for name, g in self.groups.items()},
            "optimizer": vars(self.optimizer),
        }


def profile_steps(
    config: ModelConfig, params: np.ndarray, tokens: np.ndarray, targets: np.ndarray, steps: int, kernels=None
) -> StepProfile:
    """Per step of `steps` after one warm-up: forward + backward of a model of `config` starting
    from `params` (copied) on (tokens, targets), then Adam, every piece timed (`kernels`: a set's
    name or one of kernels.py's sets; default the default set)."""
    recorder = Recorder()
    k = timed(get_kernels(kernels), recorder)
    model = Transformer(config, params.copy(), kernels=k)
    adam = Adam(model.params.size, config.np_dtype, kernels=k)
    forward_backward = 0.0
    for step in range(steps + 1):
        if step == 1:
            recorder.reset()
            forward_backward = 0.0
        t0 = time.perf_counter()
        model.forward(tokens, targets)
        model.backward()
        forward_backward += time.perf_counter() - t0
        adam.step(model.params, model.grads)
    groups = recorder.by_group()
    optimizer = groups.pop("optimizer", PieceTotals())
    inside = sum(g.seconds for g in groups.values())
    groups["other"] = PieceTotals(seconds=max(forward_backward - inside, 0.0))
    per_step = {name: _per_step(groups.get(name, PieceTotals()), steps) for name in GROUPS}
    return StepProfile(forward_backward / steps, per_step, _per_step(optimizer, steps))


def _per_step(t: PieceTotals, steps: int) -> PieceTotals:
    return PieceTotals(t.calls // steps, t.seconds / steps, t.flops / steps, t.bytes / steps)
