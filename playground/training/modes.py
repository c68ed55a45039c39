"""The data-parallel modes, one table: the node's `mode` choices, the report's order and words, and
which step each mode runs derive from it.

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
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    """`overlaps`: its all-reduces run on the communication thread during backward; `sharded`: the
    optimizer's states are split across ranks (ZeRO-1)."""

    name: str
    summary: str
    overlaps: bool
    sharded: bool


MODES: tuple[Mode, ...] = (
    Mode(
        "per_tensor",
        "one all-reduce per parameter, on the communication thread as each gradient is ready",
        overlaps=True,
        sharded=False,
    ),
    Mode(
        "bucketed",
        "DDP's buckets (reverse parameter order, capped, first 1 MiB), each all-reduced on the "
        "communication thread as soon as its last gradient is written",
        overlaps=True,
        sharded=False,
    ),
    Mode(
        "after_backward",
        "one all-reduce of every gradient after backward (no overlap)",
        overlaps=False,
        sharded=False,
    ),
    Mode(
        "zero1",
        "ZeRO-1: reduce-scatter, Adam on this rank's 1/N shard (1/N of the states), all-gather",
        overlaps=False,
        sharded=True,
    ),
)
BY_NAME: dict[str, Mode] = {m.name: m for m in MODES}
NAMES: tuple[str, ...] = tuple(BY_NAME)
