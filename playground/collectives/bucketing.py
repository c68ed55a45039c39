"""Packing gradients into buckets, as PyTorch DDP does before all-reducing them: the one `Bucket`
and the one planner (`plan_buckets`) of every lab that all-reduces gradients: the buckets lab
(made-up gradients of real architectures' sizes), the overlap lab (layers of set sizes) and the
training lab (a real model's gradients).

Why buckets: each all-reduce pays alpha per step, so 1000 small all-reduces pay it 1000 times
(lecture P4 section 5.3); one bucket of everything pays it once but cannot start until backward
has produced the last gradient, so nothing overlaps with compute (section 3.5). A cap of about
25 MiB (DDP's `bucket_cap_mb`) amortises alpha and still lets early buckets go while backward
continues. DDP also caps the *first* bucket at 1 MiB (`_DEFAULT_FIRST_BUCKET_BYTES`) so that
communication starts as early as possible.

Rules (`plan_buckets`):
- the tensors come in the order backward produces them (the reverse of the model's parameters:
  the last layer first), and keep it: buckets come out in the order they become ready, and every
  bucket is a contiguous run of tensors, hence one contiguous slice of a flat buffer of them
  (`Bucket.view`), all-reduced without a packing copy, as with DDP's `gradient_as_bucket_view`;
- a bucket never exceeds its cap, except a tensor larger than the cap, which gets a bucket of
  its own (the default: a hard cap is easier to reason about and to test); or, with
  `close_at_cap`, DDP's own rule (`compute_bucket_assignment_by_size` in its reducer): a tensor
  joins the open bucket, which closes once it *reaches* its cap, so buckets overshoot by up to
  one tensor. The two differ only in where a boundary falls, which on a real model changes the
  number of all-reduces (a 128 KiB matrix after 1.5 KiB of biases: one bucket for DDP, two for
  the hard cap); the training lab follows DDP to be compared with it;
- the first bucket uses `first_cap_bytes`, later ones `cap_bytes`;
- the two extremes the bucketed schedule is compared with are caps too: 0 bytes gives one bucket
  per tensor (what a naive data-parallel loop does), None one bucket of everything (one
  all-reduce after the whole backward).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from playground.core.errors import UsageError

MIB = 1024 * 1024
DDP_BUCKET_CAP_BYTES = 25 * MIB
DDP_FIRST_BUCKET_BYTES = 1 * MIB


@dataclass(frozen=True)
class Bucket:
    """Tensors `first`..`last` (backward order), `num_bytes` in all, starting `offset_bytes` into a
    flat buffer of the tensors laid out in that order."""

    index: int
    first: int
    num_tensors: int
    num_bytes: int
    offset_bytes: int

    @property
    def tensor_indices(self) -> range:
        return range(self.first, self.first + self.num_tensors)

    @property
    def last(self) -> int:
        """The tensor whose gradient completes this bucket (it is ready when this one is)."""
        return self.first + self.num_tensors - 1

    def view(self, flat: np.ndarray, forward: bool = False) -> np.ndarray:
        """This bucket's slice of `flat`, the buffer of exactly the planned tensors, in backward
        order; `forward`: in the opposite (the parameters') order, as a model's flat gradient
        buffer is (a run of consecutive tensors is one slice in either order)."""
        start = self.offset_bytes // flat.itemsize
        stop = start + self.num_bytes // flat.itemsize
        if forward:
            start, stop = flat.size - stop, flat.size - start
        return flat[start:stop]


def plan_buckets(
    tensor_bytes: Sequence[int],
    cap_bytes: int | None,
    first_cap_bytes: int | None = None,
    close_at_cap: bool = False,
) -> list[Bucket]:
    """Buckets of consecutive tensors (`tensor_bytes` in backward order), each at most its cap
    unless it holds one larger tensor (with `close_at_cap`: each closed by the tensor that makes it
    reach its cap, as DDP does). `cap_bytes` 0: one bucket per tensor; None: one bucket of all."""
    if cap_bytes is not None and cap_bytes < 0:
        raise UsageError(f"must be >= 0, got {cap_bytes}", field="cap_bytes")
    if first_cap_bytes is not None and first_cap_bytes < 0:
        raise UsageError(f"must be >= 0, got {first_cap_bytes}", field="first_cap_bytes")
    for i, n in enumerate(tensor_bytes):
        if n < 0:
            raise UsageError(f"must be >= 0, got {n}", field=f"tensor_bytes[{i}]")
    later_cap: float = math.inf if cap_bytes is None else cap_bytes  # None: one bucket of all
    first_cap = None if cap_bytes is None else first_cap_bytes
    buckets: list[Bucket] = []
    first, size, offset = 0, 0, 0

    def current_cap() -> float:
        return first_cap if (not buckets and first_cap is not None) else later_cap

    def close(end: int) -> None:
        nonlocal first, size, offset
        buckets.append(Bucket(len(buckets), first, end - first, size, offset))
        first, size, offset = end, 0, offset + size

    for i, n in enumerate(tensor_bytes):
        if close_at_cap:
            size += n
            if size >= current_cap():
                close(i + 1)
            continue
        cap = current_cap()
        if i > first and (cap == 0 or size + n > cap):  # cap 0: no two tensors share, even empty ones
            close(i)
        size += n
    if len(tensor_bytes) > first:
        close(len(tensor_bytes))
    return buckets
