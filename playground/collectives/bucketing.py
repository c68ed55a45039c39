"""Packing gradients into buckets, as PyTorch DDP does before all-reducing them.

Shared by the labs that all-reduce gradients: the buckets lab (made-up gradients of real
architectures' sizes) and the training lab (a real model's gradients).

Why buckets: each all-reduce pays alpha per step, so 1000 small all-reduces pay it 1000 times
(lecture P4 section 5.3); one bucket of everything pays it once but cannot start until backward
has produced the last gradient, so nothing overlaps with compute (section 3.5). A cap of about
25 MiB (DDP's `bucket_cap_mb`) amortises alpha and still lets early buckets go while backward
continues. DDP also caps the *first* bucket at 1 MiB (`_DEFAULT_FIRST_BUCKET_BYTES`) so that
communication starts as early as possible.

Rules here (`assign_buckets`):
- tensors keep their order (backward order in, buckets out in the order they become ready),
  so every bucket is a contiguous run of tensors;
- a bucket never exceeds its cap, except a tensor larger than the cap, which gets a bucket of
  its own (the default: a hard cap is easier to reason about and to test); or, with
  `close_at_cap`, DDP's own rule (`compute_bucket_assignment_by_size` in its reducer): a tensor
  joins the open bucket, which closes once it *reaches* its cap, so buckets overshoot by up to
  one tensor. The two differ only in where a boundary falls, which on a real model changes the
  number of all-reduces (a 128 KiB matrix after 1.5 KiB of biases: one bucket for DDP, two for
  the hard cap); the training lab follows DDP to be compared with it;
- the first bucket uses `first_cap_bytes`, later ones `cap_bytes`.
`per_tensor` and `single_bucket` are the two extremes the bucketed schedule is compared with.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError

MIB = 1024 * 1024
DDP_BUCKET_CAP_BYTES = 25 * MIB
DDP_FIRST_BUCKET_BYTES = 1 * MIB


@dataclass(frozen=True)
class Bucket:
    """Tensors `first`..`first + num_tensors - 1` (backward order), `num_bytes` in all."""

    index: int
    first: int
    num_tensors: int
    num_bytes: int

    @property
    def tensor_indices(self) -> range:
        return range(self.first, self.first + self.num_tensors)

    @property
    def last(self) -> int:
        """The tensor whose gradient completes this bucket (it is ready when this one is)."""
        return self.first + self.num_tensors - 1


def assign_buckets(
    tensor_bytes: Sequence[int],
    cap_bytes: int,
    first_cap_bytes: int | None = None,
    close_at_cap: bool = False,
) -> list[Bucket]:
    """Buckets of consecutive tensors, each at most its cap unless it holds one larger tensor (with
    `close_at_cap`: each closed by the tensor that makes it reach its cap, as DDP does)."""
    if cap_bytes < 0:
        raise UsageError(f"must be >= 0, got {cap_bytes}", field="cap_bytes")
    if first_cap_bytes is not None and first_cap_bytes < 0:
        raise UsageError(f"must be >= 0, got {first_cap_bytes}", field="first_cap_bytes")
    for i, n in enumerate(tensor_bytes):
        if n < 0:
            raise UsageError(f"must be >= 0, got {n}", field=f"tensor_bytes[{i}]")
    buckets: list[Bucket] = []
    first, size = 0, 0

    def current_cap() -> int:
        return first_cap_bytes if (not buckets and first_cap_bytes is not None) else cap_bytes

    def close(end: int) -> None:
        nonlocal first, size
        buckets.append(Bucket(len(buckets), first, end - first, size))
        first, size = end, 0

    for i, n in enumerate(tensor_bytes):
        if close_at_cap:
            size += n
            if size >= current_cap():
                close(i + 1)
            continue
        if i > first and size + n > current_cap():
            close(i)
        size += n
    if len(tensor_bytes) > first:
        close(len(tensor_bytes))
    return buckets


def per_tensor(tensor_bytes: Sequence[int]) -> list[Bucket]:
    """One all-reduce per tensor: what a naive data-parallel loop does."""
    return [Bucket(i, i, 1, n) for i, n in enumerate(tensor_bytes)]


def single_bucket(tensor_bytes: Sequence[int]) -> list[Bucket]:
    """Everything in one all-reduce, started after the whole backward."""
    return assign_buckets(tensor_bytes, cap_bytes=sum(tensor_bytes))
