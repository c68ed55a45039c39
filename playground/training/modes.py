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
- zero2: ZeRO stage 2: each unit's gradients (a block by default) reduce-scattered on the
  communication thread as soon as backward finishes the unit, into this rank's shard; no rank holds
  the whole gradient; Adam on the shard, an all-gather per unit after it.
- zero3: ZeRO stage 3, PyTorch's FSDP: the parameters sharded too, each unit all-gathered before its
  forward and again before its backward (the next units prefetched on the communication thread)
  and freed after use; gradients as zero2's.

The first three are one strategy with three bucket plans (`reducer.AllReduceBuckets`); zero1 is
`zero.ZeroOne`, zero2 and zero3 `zero2.ZeroTwo` and `zero3.ZeroThree` (the units: `units`). All
follow `GradientStrategy`, so a step has one path whatever the mode.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from playground.collectives.bucketing import Bucket, plan_buckets
from playground.training.checks import Reduction
from playground.training.reducer import AllReduceBuckets
from playground.training.whole_params import Span
from playground.training.zero import ZeroOne
from playground.training.zero2 import ZeroTwo
from playground.training.zero3 import ZeroThree


class GradientStrategy(Protocol):
    """What a mode does with the gradients, the optimizer and (ZeRO-3) the parameters. A trainer
    calls, each step: `begin(step)` before its first forward; the model's pieces run inside
    `unit_span(span)` (ZeRO-3 gathers a piece's units before it and frees them after); backward hands
    each final gradient to `on_grad_ready(layout index)` (None: the strategy takes nothing during
    backward); `reduce()`, the communication the step waits for after backward; the checks read
    `reductions()`; `update()`, the optimizer; `gather()`, what must follow the update before every
    rank holds every parameter it keeps; then the checks' `agree_params(step, mode)`.
    `reduces_every_micro_batch`: with gradient accumulation each micro-batch's backward goes through
    the strategy (ZeRO-2, ZeRO-3: their shard is the sum), else the trainer accumulates and hands
    over the last. `collective_s` is the step's collectives' own time, wherever they ran (`waited_s`
    of ZeRO-3: what forward and backward waited for); `close()` at the end.

    `state()` is this rank's part of the mode's state a checkpoint keeps besides the parameters (the
    optimizer's: all of it, or this rank's shard; ZeRO-3 its parameter shards too), named arrays it
    may hand out as views; `load_state(state)` goes on from one, so the next step is bit for bit the
    one it would have taken."""

    buckets: list[Bucket]
    on_grad_ready: Callable[[int], None] | None
    collective_s: float
    reduces_every_micro_batch: bool

    @property
    def waited_s(self) -> dict[str, float]: ...

    def begin(self, step: int) -> None: ...
    def unit_span(self, span: Span) -> Span: ...
    def reduce(self) -> None: ...
    def reductions(self) -> list[Reduction]: ...
    def update(self) -> None: ...
    def gather(self) -> None: ...
    def agree_params(self, step: int, mode: str) -> str: ...
    def full_params(self) -> np.ndarray: ...
    def held(self, ranges: Sequence[tuple[int, int]]) -> np.ndarray: ...
    def memory(self) -> dict: ...
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
    """`plan(backward_bytes, cap, first_cap)`: its buckets (zero2 and zero3 reduce-scatter units
    instead, their strategies' own); `strategy`: the `GradientStrategy` class that runs it;
    `overlaps`: its collectives run on the communication thread during the passes; `stage`: ZeRO's
    stage, what is split across ranks (0: nothing; 1: the optimizer's states; 2: and the gradients;
    3: and the parameters).

    A `Params` field of this type takes a mode's name (`parse_param`) and writes it back as the
    name (`to_param`)."""

    name: str
    summary: str
    plan: Plan
    strategy: type
    overlaps: bool
    stage: int
    ALLOWED: ClassVar[str] = ""  # what a scenario may say (the reference), set below

    @property
    def sharded(self) -> bool:
        """The optimizer's states are split across ranks (ZeRO-1 and up)."""
        return self.stage >= 1

    def gradients(self, comm, model, setup, owns_comm: bool = True) -> GradientStrategy:
        """This mode's strategy for `model` on this rank (`setup`: the run's `TrainSetup`), its
        buckets planned over the gradients in the order backward finishes them. `owns_comm`: the
        trainer leaves the communicator to the strategy while it computes (data parallelism alone;
        not a pipeline stage or a tensor shard, whose own messages run then)."""
        itemsize = model.grads.itemsize
        backward_bytes = [s.size * itemsize for s in reversed(model.layout.specs)]
        buckets = self.plan(backward_bytes, setup.bucket_cap_bytes, setup.first_bucket_bytes)
        return self.strategy(comm, model, buckets, setup, self, owns_comm)

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
        stage=0,
    ),
    Mode(
        "bucketed",
        "DDP's buckets (reverse parameter order, capped, first 1 MiB), each all-reduced on the "
        "communication thread as soon as its last gradient is written",
        ddp_buckets,
        AllReduceBuckets,
        overlaps=True,
        stage=0,
    ),
    Mode(
        "after_backward",
        "one all-reduce of every gradient after backward (no overlap)",
        one_bucket,
        AllReduceBuckets,
        overlaps=False,
        stage=0,
    ),
    Mode(
        "zero1",
        "ZeRO-1: reduce-scatter, Adam on this rank's 1/N shard (1/N of the states), all-gather",
        one_bucket,
        ZeroOne,
        overlaps=False,
        stage=1,
    ),
    Mode(
        "zero2",
        "ZeRO-2: each unit's gradients reduce-scattered into this rank's shard as backward ends the "
        "unit (no rank holds them all), Adam on the shard, all-gather",
        one_bucket,
        ZeroTwo,
        overlaps=True,
        stage=2,
    ),
    Mode(
        "zero3",
        "ZeRO-3 (FSDP): parameters sharded too, each unit all-gathered before its forward and its "
        "backward (prefetched), freed after; gradients as zero2's",
        one_bucket,
        ZeroThree,
        overlaps=True,
        stage=3,
    ),
)
BY_NAME: dict[str, Mode] = {m.name: m for m in MODES}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DDP_LIKE = BY_NAME["bucketed"]  # PyTorch DDP's own scheme: what the DDP baseline is compared with
Mode.ALLOWED = "one of " + ", ".join(repr(n) for n in NAMES)  # what a scenario may say (the reference)
