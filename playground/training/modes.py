"""The data-parallel modes, one table: each a `Mode` that carries its gradient strategy. The node's
`mode` choices (a scenario's names become `Mode`s when its `Params` are built), the report's order
and words, and what a step does derive from it.

Every mode computes the same update (the gradient summed over ranks, each rank's share averaged
by the global batch's token count, then Adam); they differ in how the gradients travel and where
the optimizer's states live:

- per_tensor: one all-reduce per parameter, started on the communication thread the moment
  backward hands that gradient over. Overlaps with backward, but pays alpha once per tensor.
- bucketed: PyTorch DDP's reducer: consecutive tensors in backward order packed into buckets
  under `bucket_cap_mb` (the first bucket smaller, 1 MiB), a bucket's all-reduce started on the
  communication thread as soon as its last gradient is written, while backward goes on.
- after_backward: one all-reduce of the whole flat gradient buffer after backward: one alpha,
  no overlap (what a hand-written data-parallel loop does first).
- zero1: ZeRO stage 1: a reduce-scatter leaves each rank the summed gradient of its 1/N of the
  parameters, Adam updates only that shard (so each rank keeps 1/N of m and v), and an
  all-gather brings every rank the updated parameters.

The first three are one strategy with three bucket plans (`reducer.AllReduceBuckets`); zero1 is
the other (`zero.ZeroOne`). Both follow `GradientStrategy`, so a step has one path whatever the mode.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from playground.collectives.bucketing import Bucket, plan_buckets
from playground.training.checks import Reduction
from playground.training.reducer import AllReduceBuckets
from playground.training.zero import ZeroOne


class GradientStrategy(Protocol):
    """What a mode does with the gradients and the optimizer. `DataParallel.train_step` calls, each
    step: `begin(step)`; backward, handing each final gradient to `on_grad_ready(layout index)`
    (None: the strategy takes nothing during backward); `reduce()`, the communication the step
    waits for after backward; the checks read `reductions()`; `update()`, the optimizer;
    `gather()`, what must follow the update before every rank holds every parameter.
    `collective_s` is the step's collectives' own time, wherever they ran; `close()` at the end.

    `state()` is this rank's part of the mode's state a checkpoint keeps besides the parameters (the
    optimizer's: all of it, or this rank's shard), named arrays it may hand out as views;
    `load_state(state)` goes on from one, so the next step is bit for bit the one it would have
    taken. A strategy whose parameters are sharded too keeps its shard there."""

    buckets: list[Bucket]
    on_grad_ready: Callable[[int], None] | None
    collective_s: float

    def begin(self, step: int) -> None: ...
    def reduce(self) -> None: ...
    def reductions(self) -> list[Reduction]: ...
    def update(self) -> None: ...
    def gather(self) -> None: ...
    def close(self) -> None: ...
    def state(self) -> dict[str, np.ndarray]: ...
    def load_state(self, state: dict[str, np.ndarray]) -> None: ...
    @property
    def state_bytes(self) -> int: ...


# How a mode buckets the gradients: (sizes in backward order, bucket_cap_bytes, first_bucket_bytes)
Plan = Callable[[Sequence[int], int, int | None], list[Bucket]]


def per_parameter(backward_bytes: Sequence[int], cap: int, first_cap: int | None) -> list[Bucket]:
    """One bucket per parameter."""
    return plan_buckets(backward_bytes, 0)


def ddp_buckets(backward_bytes: Sequence[int], cap: int, first_cap: int | None) -> list[Bucket]:
    """DDP's: capped, the first bucket smaller, each closed once it reaches its cap."""
    return plan_buckets(backward_bytes, cap, first_cap, close_at_cap=True)


def one_bucket(backward_bytes: Sequence[int], cap: int, first_cap: int | None) -> list[Bucket]:
    """Everything in one."""
    return plan_buckets(backward_bytes, None)


@dataclass(frozen=True)
class Mode:
    """`plan(backward_bytes, cap, first_cap)`: its buckets; `strategy`: the `GradientStrategy`
    class that runs it; `overlaps`: its all-reduces run on the communication thread during
    backward; `sharded`: the optimizer's states are split across ranks (ZeRO-1).

    A `Params` field of this type takes a mode's name (`parse_param`) and writes it back as the
    name (`to_param`)."""

    name: str
    summary: str
    plan: Plan
    strategy: type
    overlaps: bool
    sharded: bool
    ALLOWED: ClassVar[str] = ""  # what a scenario may say (the reference), set below

    def gradients(self, comm, model, setup) -> GradientStrategy:
        """This mode's strategy for `model` on this rank (`setup`: the run's `TrainSetup`), its
        buckets planned over the gradients in the order backward finishes them."""
        itemsize = model.grads.itemsize
        backward_bytes = [s.size * itemsize for s in reversed(model.layout.specs)]
        buckets = self.plan(backward_bytes, setup.bucket_cap_bytes, setup.first_bucket_bytes)
        return self.strategy(comm, model, buckets, setup, self)

    @classmethod
    def parse_param(cls, value) -> "Mode":
        if not isinstance(value, str) or value not in BY_NAME:
            raise ValueError(f"expected {cls.ALLOWED}")
        return BY_NAME[value]

    def to_param(self) -> str:
        return self.name


MODES: tuple[Mode, ...] = (
    Mode(
        "per_tensor",
        "one all-reduce per parameter, on the communication thread as each gradient is ready",
        per_parameter,
        AllReduceBuckets,
        overlaps=True,
        sharded=False,
    ),
    Mode(
        "bucketed",
        "DDP's buckets (reverse parameter order, capped, first 1 MiB), each all-reduced on the "
        "communication thread as soon as its last gradient is written",
        ddp_buckets,
        AllReduceBuckets,
        overlaps=True,
        sharded=False,
    ),
    Mode(
        "after_backward",
        "one all-reduce of every gradient after backward (no overlap)",
        one_bucket,
        AllReduceBuckets,
        overlaps=False,
        sharded=False,
    ),
    Mode(
        "zero1",
        "ZeRO-1: reduce-scatter, Adam on this rank's 1/N shard (1/N of the states), all-gather",
        one_bucket,
        ZeroOne,
        overlaps=False,
        sharded=True,
    ),
)
BY_NAME: dict[str, Mode] = {m.name: m for m in MODES}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DDP_LIKE = BY_NAME["bucketed"]  # PyTorch DDP's own scheme: what the DDP baseline is compared with
Mode.ALLOWED = "one of " + ", ".join(repr(n) for n in NAMES)  # what a scenario may say (the reference)
