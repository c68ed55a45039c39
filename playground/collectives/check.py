"""Inputs with a closed-form answer, so every rank can check a collective without communicating.

Rank r's input is a pattern of small integers ((7 i + 13 r) mod 17) - 8: every partial sum over up to
64 ranks is exact in every dtype, so the result must equal numpy's bit for bit, whatever the
reduction order.
"""

import numpy as np

from playground.collectives.chunks import ChunkBounds
from playground.collectives.ops import ReduceOp
from playground.errors import UsageError

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce")
ROOT = 0


PERIOD = 17


def pattern(rank: int, count: int, dtype: str) -> np.ndarray:
    """Rank `rank`'s input: ((7 i + 13 rank) mod 17) - 8 for i < count (periodic in i: built from
    one period, which keeps a 1 GiB input cheap to make)."""
    cycle = (((7 * np.arange(PERIOD) + 13 * rank) % PERIOD) - 8).astype(dtype)
    return np.resize(cycle, count)


def expected_result(size: int, count: int, dtype: str, op: ReduceOp) -> np.ndarray:
    """The op-reduction over `size` ranks of their patterns of `count` elements (periodic too)."""
    acc = pattern(0, PERIOD, "int64")
    for r in range(1, size):
        op.ufunc(acc, pattern(r, PERIOD, "int64"), out=acc)
    return np.resize(acc.astype(dtype), count)


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each link carries relative to algbw."""
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ("allgather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def input_count(collective: str, size_bytes: int, itemsize: int, n: int) -> int:
    """Elements each rank passes in, with `size_bytes` as nccl-tests defines it for the collective."""
    total = size_bytes // itemsize
    return total // n if collective == "allgather" else total


def expected_output(
    collective: str, rank: int, n: int, count: int, dtype: str, op: ReduceOp
) -> np.ndarray | None:
    """What rank `rank` must hold after the collective on inputs of `count` elements (None: nothing)."""
    if collective == "allreduce":
        return expected_result(n, count, dtype, op)
    if collective == "allgather":
        return np.concatenate([pattern(r, count, dtype) for r in range(n)]) if n else pattern(0, 0, dtype)
    if collective == "reduce_scatter":
        a, b = ChunkBounds(count, n)[rank]
        return expected_result(n, count, dtype, op)[a:b]
    if collective == "broadcast":
        return pattern(ROOT, count, dtype)
    if collective == "reduce":
        return expected_result(n, count, dtype, op) if rank == ROOT else None
    raise UsageError(f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")


def count_wrong(got: np.ndarray | None, want: np.ndarray | None) -> int:
    if want is None:
        return 0 if got is None else 1
    if got is None or got.shape != want.shape or got.dtype != want.dtype:
        return max(1, want.size)
    return int(np.count_nonzero(got != want))
