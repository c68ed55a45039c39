"""Tensor parallelism as a plan: which of the transformer's matrices are split over t ranks, and how
(Megatron-LM, Shoeybi et al. 2019), applied to the one model as torchtitan applies
`ColwiseParallel` / `RowwiseParallel` to an unchanged module.

Each block's attention and MLP become a column-parallel product followed by a row-parallel one:

    attention:  attn.c_attn (d, 3d)  by columns, a head at a time: shard r holds q, k and v of heads
                                     r H/t .. (r+1) H/t - 1, so it attends over its own heads alone
                attn.c_proj (d, d)   by rows: the same heads' rows; its product is a partial sum
    MLP:        mlp.c_fc (d, 4d)     by columns: 4d/t hidden units, GELU on them alone
                mlp.c_proj (4d, d)   by rows: those units' rows; a partial sum again

The partial sums are completed by an all-reduce over the tensor group after each row-parallel
product (the paper's g: all-reduce forward, identity backward), and the biases of the two c_proj,
replicated, are added once, after it. In backward, the input gradients of the column-parallel
products are partial sums over the shards and are all-reduced before the layernorm below them
(the paper's f: identity forward, all-reduce backward). So a block costs two all-reduces of the
activation (tokens x d) forward and two backward, on the critical path; everything else
(embeddings, layernorms, the head and its loss) is replicated and computed identically on every
shard, whose gradients are then identical too (no all-reduce for them).

What a shard holds is `shard_shape`; `shard` cuts a whole parameter into this rank's piece and
`unshard` puts t pieces back together (one process's parameters, compared with a tensor-parallel
run). `StagePlan(..., tensor=TensorPlan(r, t))` composes the split with a pipeline stage's blocks.
"""

from dataclasses import dataclass

import numpy as np

from playground.core.errors import ParamError
from playground.transformer.config import ModelConfig


@dataclass(frozen=True)
class Split:
    """Split along `axis`; the axis is `groups` runs laid one after another (c_attn's q | k | v),
    each split into t equal pieces, and a shard holds its piece of every run."""

    axis: int
    groups: int = 1
    style: str = "columns"  # Megatron's names: column-parallel or row-parallel


COLUMNS_BY_HEAD = Split(axis=-1, groups=3, style="columns")  # q | k | v, each split by heads
SPLITS: dict[str, Split] = {  # a block's parameter suffix -> its split; the rest is replicated
    "attn.c_attn.weight": COLUMNS_BY_HEAD,
    "attn.c_attn.bias": COLUMNS_BY_HEAD,
    "attn.c_proj.weight": Split(axis=0, style="rows"),
    "mlp.c_fc.weight": Split(axis=-1),
    "mlp.c_fc.bias": Split(axis=-1),
    "mlp.c_proj.weight": Split(axis=0, style="rows"),
}


def split_of(name: str) -> Split | None:
    """How parameter `name` (the whole model's) is split; None: replicated."""
    if not name.startswith("h."):
        return None
    return SPLITS.get(name[name.index(".", 2) + 1 :])


@dataclass(frozen=True)
class TensorPlan:
    """Shard `rank` of `size` (the rank's index in `grid.tensor`); size 1 holds every matrix whole."""

    rank: int = 0
    size: int = 1

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise ParamError("tensor", f"must be an integer >= 1, got {self.size!r}")
        if not 0 <= self.rank < self.size:
            raise ParamError("tensor", f"shard {self.rank} is not one of 0..{self.size - 1}")

    @property
    def is_split(self) -> bool:
        return self.size > 1

    def heads(self, config: ModelConfig) -> int:
        """The attention heads this shard computes."""
        return config.heads // self.size

    def shard_shape(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        split = split_of(name)
        if split is None or self.size == 1:
            return shape
        out = list(shape)
        out[split.axis] //= self.size
        return tuple(out)

    def shard(self, name: str, whole: np.ndarray) -> np.ndarray:
        """This shard's piece of parameter `name` (its whole value `whole`), contiguous."""
        split = split_of(name)
        if split is None or self.size == 1:
            return whole
        runs = _runs(whole, split)
        piece = runs.shape[-1] // self.size
        mine = runs[..., self.rank * piece : (self.rank + 1) * piece]
        return np.ascontiguousarray(_joined(mine, split, whole.ndim))

    def unshard(self, name: str, pieces: list[np.ndarray]) -> np.ndarray:
        """The whole parameter from every shard's piece, in shard order (`shard`'s inverse)."""
        split = split_of(name)
        if split is None or len(pieces) == 1:
            return pieces[0]
        runs = np.concatenate([_runs(p, split) for p in pieces], axis=-1)
        return _joined(runs, split, pieces[0].ndim)

    def describe(self) -> str:
        return f"shard {self.rank} of {self.size}" if self.is_split else "unsplit"


def _runs(a: np.ndarray, split: Split) -> np.ndarray:
    """`a` with its split axis last, as (..., groups, run)."""
    moved = np.moveaxis(a, split.axis, -1)
    return moved.reshape(*moved.shape[:-1], split.groups, moved.shape[-1] // split.groups)


def _joined(runs: np.ndarray, split: Split, ndim: int) -> np.ndarray:
    """`_runs`' inverse."""
    flat = runs.reshape(*runs.shape[:-2], runs.shape[-2] * runs.shape[-1])
    return np.moveaxis(flat, -1, split.axis if split.axis >= 0 else ndim + split.axis)


def check_tensor(config: ModelConfig, size: int, key: str = "tensor") -> None:
    """ParamError naming `key` unless t = `size` splits the heads evenly (and so the width d and the
    MLP's 4 d: d = heads x head_dim)."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ParamError(key, f"must be an integer >= 1, got {size!r}")
    if config.heads % size:
        fits = [t for t in range(1, config.heads + 1) if config.heads % t == 0]
        raise ParamError(
            key,
            f"t = {size} ranks must divide the model's {config.heads} attention heads (each shard "
            f"computes whole heads, and d_model {config.d_model} and the MLP's {4 * config.d_model} "
            f"units with them), e.g. {', '.join(map(str, fits))}",
        )


def tensor_plans(config: ModelConfig, size: int, key: str = "tensor") -> tuple[TensorPlan, ...]:
    """Every shard's plan at t = `size` (checked: `check_tensor`)."""
    check_tensor(config, size, key)
    return tuple(TensorPlan(r, size) for r in range(size))
