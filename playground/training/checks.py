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
   and the sum of the result it holds; these go to every rank, and every rank checks every result
   before the update, so a corrupted gradient is never applied.

   Rounding: a reduction of N values adds at most (N - 1) u sum|x| to an element's sum (u the
   unit roundoff of the dtype), and the checksums themselves are float32 pairwise sums of blocks
   added in float64 (at most ~16 u of each block's absolute sum). So a result is wrong when its
   sum differs from the ranks' total by more than `tolerance` = 2 (N + 32) u A, A the ranks'
   total absolute sum: no rounding reaches it, and a real change does as long as it is larger
   (float32: 4.3e-6 A at 4 ranks). The corrupt drill (`fault.action=corrupt`) flips the top
   exponent bit of one element, which changes it by at least 2 or makes it inf or NaN (comm/
   faults.py), far beyond the tolerance of this lab's buckets; a non-finite sum always fails.

3. ZeRO-3, where no two ranks hold the same parameters: after the update each rank sends every rank
   the exact sum of each shard it owns (`exact_sum`: its words as unsigned integers modulo 2^64, the
   same on any rank and at any address, changed by any flipped bit), and every unit a rank gathers is
   checked chunk by chunk against its owner's sum before the model reads it (`zero3.ZeroThree`).

Both travel as small JSON objects (`allgather_obj`): two exchanges per step (the checksums and
loss shares before the update, the hashes or shard sums after it), not a collective over the data.
"""

import time
import zlib
from dataclasses import dataclass

import numpy as np

from playground.core.errors import ResultMismatch

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


def exact_sum(x: np.ndarray) -> int:
    """The sum of `x`'s words as unsigned integers modulo 2^64: exact in any order and at any address
    (a float sum is neither), so a shard's owner and a rank that received it compute the same number,
    and a flipped bit changes it. What ZeRO-3's ranks check every gathered shard against."""
    words = np.ascontiguousarray(x).view(np.uint64 if x.itemsize == 8 else np.uint32)
    return int(words.sum(dtype=np.uint64))


def params_hash(params: np.ndarray) -> str:
    """CRC-32 of the buffer's bytes, as 8 hex digits (50 ms for 100 MB here; any bit differs)."""
    return f"{zlib.crc32(np.ascontiguousarray(params).data.cast('B')):08x}"


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


def step_name(step: int, mode: str = "") -> str:
    """ "step 3 of mode bucketed": steps count from 0 again in every mode, so a step needs its mode."""
    return f"step {step} of mode {mode}" if mode else f"step {step}"


def verify_reductions(
    step: int, records: list[list], names: list[str], dtype, rank: int, mode: str = ""
) -> None:
    """Raise ResultMismatch (from `rank`'s view) if a reduction's result differs from what the ranks
    put in; `records[r]` is rank r's list of `Reduction.to_json()`, in `names`' order."""
    n, u = len(records), float(np.finfo(dtype).eps) / 2
    for j, name in enumerate(names):
        total = sum(rec[j][0] for rec in records)
        tol = tolerance(n, u, sum(rec[j][1] for rec in records))
        wrong = [
            (r, rec[j][2])
            for r, rec in enumerate(records)
            if rec[j][2] is not None and not abs(rec[j][2] - total) <= tol
        ]
        if wrong:
            who = ", ".join(f"rank {r} holds {got:.9g}" for r, got in wrong)
            raise ResultMismatch(
                rank,
                f"{step_name(step, mode)}: the result of {name} was corrupted: its elements sum to the ranks' "
                f"own {total:.9g} within {tol:.2g}, but {who}",
            )


def verify_hashes(step: int, hashes: list[str], rank: int, mode: str = "") -> None:
    """Raise ResultMismatch (from `rank`'s view) naming the ranks whose parameters differ from rank 0's."""
    differ = [r for r, h in enumerate(hashes) if h != hashes[0]]
    if differ:
        raise ResultMismatch(
            rank,
            f"{step_name(step, mode)}: parameters differ across ranks after the update: rank"
            f"{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} "
            f"({', '.join(hashes[r] for r in differ)}) against rank 0 ({hashes[0]}), CRC-32 of the "
            "parameters",
        )


def check_same_in_group(group, rank: int, step: int, mine, what: str, member: str, where: str) -> None:
    """Every rank of `group` holds the same `mine` (JSON-able: a loss, a hash), or ResultMismatch from
    `rank`'s view naming the `member`s ("tensor shard") of `where` ("replica 1") that differ from the
    first, and `what` differs ("loss or replicated parameters"). For what a model-parallel group's
    ranks compute alike: a tensor group's replicated parameters, an expert group's dense ones."""
    theirs = group.allgather_obj(mine)
    differ = [r for r, o in enumerate(theirs) if o != theirs[0]]
    if differ:
        raise ResultMismatch(
            rank,
            f"step {step}: {member}{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} of {where} "
            f"differ from {member.split()[-1]} 0 in {what}: "
            + ", ".join(f"{member.split()[-1]} {r} {theirs[r]}" for r in [0, *differ]),
        )


def check_gradients(
    comm, step: int, loss: float, reductions: list[Reduction], dtype, mode: str = ""
) -> float:
    """Before the update: every rank's checksums to every rank, every result checked (a corrupted
    gradient is never applied); returns the global loss (the sum of the ranks' shares)."""
    records = comm.allgather_obj({"loss": loss, "sums": [r.to_json() for r in reductions]})
    sums = [rec["sums"] for rec in records]
    verify_reductions(step, sums, [r.name for r in reductions], dtype, comm.rank, mode)
    return float(sum(rec["loss"] for rec in records))


def check_params(comm, step: int, params: np.ndarray, mode: str = "") -> str:
    """After the update: every rank's parameter hash compared; returns this rank's."""
    digest = params_hash(params)
    verify_hashes(step, comm.allgather_obj(digest), comm.rank, mode)
    return digest


class StepChecks:
    """One step's two checks, traced and timed: `gradients` (hand it to `DataParallel.train_step`,
    which calls it between the reduction and the update), then `params(strategy)` after the update; traced
    with the name of `mode` (a `modes.Mode`)."""

    def __init__(self, comm, step: int, mode, dtype):
        self.comm, self.step, self.mode, self.dtype = comm, step, mode.name, dtype
        self.loss = float("nan")  # the global batch's loss, once `gradients` ran
        self.seconds = 0.0

    def gradients(self, loss: float, reductions: list[Reduction]) -> None:
        t0 = time.perf_counter()
        with self.comm.tracer.span("check.gradients", cat="phase", mode=self.mode, step=self.step):
            self.loss = check_gradients(self.comm, self.step, loss, reductions, self.dtype, self.mode)
        self.seconds += time.perf_counter() - t0

    def params(self, strategy) -> str:
        """After the update: the data group agrees on its parameters (`strategy.agree_params`: the
        hashes of whole parameters compared, or ZeRO-3's shard sums exchanged)."""
        t0 = time.perf_counter()
        with self.comm.tracer.span("check.params", cat="phase", mode=self.mode, step=self.step):
            digest = strategy.agree_params(self.step, self.mode)
        self.seconds += time.perf_counter() - t0
        return digest
