"""A mixture-of-experts layer's sizes and its split over ranks: `MoEConfig` (E experts, top-k, the
capacity factor, the balancing loss's weight) and `ExpertPlan` (which experts this rank holds), the
plan that `plan.StagePlan` applies to the model as it applies a `TensorPlan`.

Every block's MLP becomes E experts, each an MLP of the dense one's shape (d -> 4d -> d, GELU), and a
router (d, E) that picks k of them per token (Switch: k = 1; GShard, Mixtral: k = 2). The parameters:

    h.l.mlp.router.weight           (d, E)           in the block, where mlp.c_fc .. mlp.c_proj were
    h.l.experts.mlp.c_fc.weight     (E, d, 4d)       every block's experts, before all else
    h.l.experts.mlp.c_fc.bias       (E, 4d)
    h.l.experts.mlp.c_proj.weight   (E, 4d, d)
    h.l.experts.mlp.c_proj.bias     (E, d)

The experts come first in the flat buffer and the rest follows in the dense model's order: so the
experts are one contiguous slice, reduced over the ranks that hold the same experts, and the rest
another, reduced over every rank (Megatron-LM keeps expert parameters in buffers of their own for
this); and backward, which hands gradients over in reverse layout order, hands the experts' over
last, when every block's are final.

Expert parallelism: E experts over the P ranks of an expert group, E / P consecutive ones each (rank
r holds experts r E/P .. (r+1) E/P - 1); the router and every other parameter are whole on every rank.
"""

import math
from dataclasses import dataclass

import numpy as np

from playground.core.errors import ParamError

EXPERT_PREFIX = "experts."  # h.l.experts.mlp.*: an expert parameter (its first axis: the experts)
MLP_SUFFIXES = ("mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
ROUTER = "mlp.router.weight"


@dataclass(frozen=True)
class MoEConfig:
    """E `experts` per block, `top_k` of them per token; `capacity_factor`: each expert takes at most
    ceil(capacity_factor x T x k / E) assignments of a sequence of T tokens, the rest dropped (None:
    dropless); `aux_loss_coef`: the weight of Switch's load-balancing loss in the training loss."""

    experts: int = 8
    top_k: int = 2
    capacity_factor: float | None = None
    aux_loss_coef: float = 0.01

    def __post_init__(self):
        if not isinstance(self.experts, int) or isinstance(self.experts, bool) or self.experts < 1:
            raise ParamError("experts", f"must be an integer >= 1, got {self.experts!r}")
        if not isinstance(self.top_k, int) or not 1 <= self.top_k <= self.experts:
            raise ParamError("top_k", f"must be an integer in 1..experts={self.experts}, got {self.top_k!r}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ParamError(
                "capacity_factor",
                f"must be > 0 (1.0: room for an even share; null: dropless), got {self.capacity_factor}",
            )
        if not self.aux_loss_coef >= 0:
            raise ParamError("aux_loss_coef", f"must be >= 0, got {self.aux_loss_coef}")

    def capacity(self, tokens: int) -> int | None:
        """Places per expert in a group of `tokens` tokens (None: dropless)."""
        if self.capacity_factor is None:
            return None
        return math.ceil(self.capacity_factor * tokens * self.top_k / self.experts)

    def check_tokens(self, tokens: int, key: str = "experts") -> None:
        """ParamError naming `key` if a group of `tokens` tokens (a sequence) has fewer tokens than
        experts: capacity and the balancing loss are per sequence, and some experts would be idle in
        every one of them whatever the router learns."""
        if self.experts > tokens:
            raise ParamError(
                key,
                f"{self.experts} experts are more than the {tokens} tokens of a sequence (context), over "
                f"which each expert's capacity and the balancing loss are counted; at most {tokens}",
            )

    def expert_shapes(self, layer: int, d: int) -> list[tuple[str, tuple[int, ...]]]:
        """Block `layer`'s experts, every one of them, (name, shape) in layout order."""
        E, hidden = self.experts, 4 * d
        shapes = [(E, d, hidden), (E, hidden), (E, hidden, d), (E, d)]
        return [
            (f"h.{layer}.{EXPERT_PREFIX}{s}", shape) for s, shape in zip(MLP_SUFFIXES, shapes, strict=True)
        ]


def is_expert(name: str) -> bool:
    return name.startswith("h.") and name[name.index(".", 2) + 1 :].startswith(EXPERT_PREFIX)


@dataclass(frozen=True)
class ExpertPlan:
    """Rank `rank` of an expert group of `size` ranks holds experts `first_expert` ..
    `first_expert + local_experts - 1` of every block (its index in the grid's expert group)."""

    config: MoEConfig
    rank: int = 0
    size: int = 1

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise ParamError("expert_parallel", f"must be an integer >= 1, got {self.size!r}")
        check_expert_parallel(self.config, self.size)
        if not 0 <= self.rank < self.size:
            raise ParamError("expert_parallel", f"rank {self.rank} is not one of 0..{self.size - 1}")

    @property
    def local_experts(self) -> int:
        return self.config.experts // self.size

    @property
    def first_expert(self) -> int:
        return self.rank * self.local_experts

    @property
    def is_split(self) -> bool:
        return self.size > 1

    def model_shapes(self, dense: list[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
        """The whole MoE model's parameters from the dense model's `dense` (name, shape) list: every
        block's experts first, then the dense list with each block's MLP replaced by its router."""
        d, layers = dense[0][1][1], sorted({int(n.split(".")[1]) for n, _ in dense if n.startswith("h.")})
        experts = [s for layer in layers for s in self.config.expert_shapes(layer, d)]
        rest: list[tuple[str, tuple[int, ...]]] = []
        for name, shape in dense:
            if name.endswith(MLP_SUFFIXES[0]):
                rest.append((name[: -len(MLP_SUFFIXES[0])] + ROUTER, (d, self.config.experts)))
            elif not name.endswith(MLP_SUFFIXES):
                rest.append((name, shape))
        return experts + rest

    def shard_shape(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.local_experts, *shape[1:]) if is_expert(name) else shape

    def shard(self, name: str, whole: np.ndarray) -> np.ndarray:
        """This rank's experts of parameter `name` (its whole value), or `whole` if it is not an expert's."""
        if not is_expert(name) or self.size == 1:
            return whole
        return whole[self.first_expert : self.first_expert + self.local_experts]

    def describe(self) -> str:
        if not self.is_split:
            return f"{self.config.experts} experts"
        last = self.first_expert + self.local_experts - 1
        return f"experts {self.first_expert}-{last} of {self.config.experts}"


def check_expert_parallel(config: MoEConfig, size: int, key: str = "expert_parallel") -> None:
    """ParamError naming `key` unless `size` ranks split the experts evenly."""
    if config.experts % size:
        fits = [p for p in range(1, config.experts + 1) if config.experts % p == 0]
        raise ParamError(
            key,
            f"{size} expert-parallel ranks must divide the {config.experts} experts (each rank holds "
            f"E / P of them), e.g. {', '.join(map(str, fits))}",
        )
