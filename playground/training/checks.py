"""The checks every training step passes, or the run fails naming the step and the ranks.

Two kinds of damage and what catches each:

1. Ranks that diverge. DDP's invariant is that after every step every rank holds bit-identical
   parameters. Each rank hashes its parameters (CRC-32 of the flat buffer's bytes) after the
   update and the hashes are compared across ranks: a mismatch names the ranks that differ from
   rank 0. This catches any damage some ranks see and others do not: a bit flipped in the
   all-gather phase of a ring all-reduce (only the ranks downstream of it receive it), in ZeRO's
   all-gather of parameters (the shard's owner keeps its own), a rank that skipped a step.

2. A result that every rank sees identically. A bit flipped in the reduce-scatter phase of a ring
   all-reduce (or in ZeRO's reduce-scatter) changes a partial sum; the rank that finishes that
   chunk then sends the wrong sum to everyone, so every rank applies the same wrong gradient and
   the hashes still agree. It is caught by comparing each result against what the ranks put in:
   a SUM commutes with a linear checksum (algorithm-based fault tolerance, Huang and Abraham
   1984), so the sum of a reduced buffer's elements must equal the sum over ranks of each rank's
   own sum of its contribution, to rounding. Each rank computes, for every reduction of the step
   (each bucket's all-reduce, each ZeRO shard), the sum and the absolute sum of what it put in,
   and the sum of the result it holds; the step's record goes to every rank with the hash, and
   every rank checks every result.

   Rounding: a reduction of N values adds at most (N - 1) u sum|x| to an element's sum (u the
   unit roundoff of the dtype), and the checksums themselves are float32 pairwise sums of blocks
   added in float64 (at most ~16 u of each block's absolute sum). So a result is wrong when its
   sum differs from the ranks' total by more than `tolerance` = 2 (N + 32) u A, A the ranks'
   total absolute sum: no rounding reaches it, and a real change does as long as it is larger
   (float32: 4.3e-6 A at 4 ranks). The corrupt drill (`fault.action=corrupt`) flips the top
   exponent bit of one element, which changes it by at least 2 or makes it inf or NaN (comm/
   faults.py), far beyond the tolerance of this lab's buckets; a non-finite sum always fails.

The record travels as a small JSON object (`allgather_obj`), so the check adds one exchange per
step, not a collective over the data.
"""

import zlib
from dataclasses import dataclass

import numpy as np

from playground.errors import ResultMismatch

BLOCK_ELEMENTS = 1 << 16  # checksums: float32 pairwise sums of blocks this long, added in float64
CHECK_ROUNDING = 32  # units of roundoff the checksums themselves may add (see the module doc)


def checksum(x: np.ndarray) -> tuple[float, float]:
    """(sum, sum of absolute values) of a flat array, in float64, in blocks (one pass each, a small
    scratch buffer: a gradient bucket is up to 25 MiB)."""
    total = absolute = 0.0
    scratch = np.empty(min(x.size, BLOCK_ELEMENTS), dtype=x.dtype)
    for start in range(0, x.size, BLOCK_ELEMENTS):
        block = x[start : start + BLOCK_ELEMENTS]
        total += float(block.sum())
        absolute += float(np.abs(block, out=scratch[: block.size]).sum())
    return total, absolute


def element_sum(x: np.ndarray) -> float:
    """The first half of `checksum`: what a rank computes of a result it holds."""
    return float(sum(float(x[s : s + BLOCK_ELEMENTS].sum()) for s in range(0, x.size, BLOCK_ELEMENTS)))


def params_hash(params: np.ndarray) -> str:
    """CRC-32 of the buffer's bytes, as 8 hex digits (50 ms for 100 MB here; any bit differs)."""
    return f"{zlib.crc32(memoryview(params).cast('B')):08x}"


@dataclass
class Reduction:
    """One checked reduction of a step: what this rank put in (`local_sum`, `local_abs`) and the
    sum of the result it holds (`reduced_sum`; None where it holds none: another rank's shard)."""

    name: str
    local_sum: float
    local_abs: float
    reduced_sum: float | None = None

    def to_json(self) -> list:
        return [self.local_sum, self.local_abs, self.reduced_sum]


def tolerance(num_ranks: int, unit_roundoff: float, absolute_sum: float) -> float:
    return 2 * (num_ranks + CHECK_ROUNDING) * unit_roundoff * absolute_sum


def step_record(loss: float, params: np.ndarray, reductions: list[Reduction]) -> dict:
    """What this rank tells every other rank after a step."""
    return {"loss": loss, "hash": params_hash(params), "sums": [r.to_json() for r in reductions]}


def verify_step(step: int, records: list[dict], names: list[str], dtype, rank: int) -> None:
    """Raise ResultMismatch (from `rank`'s view) if a reduction's result differs from what the
    ranks put in, or if the ranks' parameters differ; `records[r]` is rank r's `step_record`."""
    n, u = len(records), float(np.finfo(dtype).eps) / 2
    for j, name in enumerate(names):
        total = sum(rec["sums"][j][0] for rec in records)
        absolute = sum(rec["sums"][j][1] for rec in records)
        tol = tolerance(n, u, absolute)
        wrong = [
            (r, rec["sums"][j][2])
            for r, rec in enumerate(records)
            if rec["sums"][j][2] is not None and not abs(rec["sums"][j][2] - total) <= tol
        ]
        if wrong:
            who = ", ".join(f"rank {r} holds {got:.9g}" for r, got in wrong)
            raise ResultMismatch(
                rank,
                f"step {step}: the result of {name} was corrupted: its elements sum to the ranks' "
                f"own {total:.9g} within {tol:.2g}, but {who}",
            )
    hashes = [rec["hash"] for rec in records]
    differ = [r for r, h in enumerate(hashes) if h != hashes[0]]
    if differ:
        raise ResultMismatch(
            rank,
            f"step {step}: parameters differ across ranks after the update: rank"
            f"{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} "
            f"({', '.join(hashes[r] for r in differ)}) against rank 0 ({hashes[0]}), CRC-32 of the "
            "parameters",
        )


def exchange_and_verify(
    comm, step: int, loss: float, params: np.ndarray, reductions: list[Reduction]
) -> tuple[float, str]:
    """Send this rank's record to every rank, check every record; returns the global loss (the
    sum of the ranks' shares) and the parameters' hash."""
    mine = step_record(loss, params, reductions)
    records = comm.allgather_obj(mine)
    verify_step(step, records, [r.name for r in reductions], params.dtype, comm.rank)
    return float(sum(rec["loss"] for rec in records)), mine["hash"]
