"""The pure parts every baseline shares: names, buffer layout, input pattern, expected result, rows.

Rows and the wrong count are our own bench's (`collectives.report.build_row`, `check.count_wrong`),
so a ratio of a baseline to ours compares like with like.

Nothing here imports torch or mpi4py, so the bench command, the tests and both worker kinds use one
definition of what a size means, what every rank sends and what the right answer is.

Sizes follow nccl-tests so our table and theirs read the same way:
  allreduce, broadcast, reduce   size = the buffer (input = output) in bytes
  allgather, gather              size = the total output; each rank contributes size / N
  reduce_scatter                 size = the total input; each rank receives size / N
  alltoall                       size = each rank's input (= its output): N blocks of size / N
  scatter                        size = the root's input; each rank receives size / N
  sendrecv                       size = the buffer each rank sends (and receives)
A size that is not a whole number of elements (per rank, where it is split) is rounded down, as
nccl-tests does; the row reports the bytes really moved.

Every rank fills its input with x_r[i] = ((7 i + 13 r) mod 17) - 8: small integers, so any sum over
up to 2**20 ranks is exact in every dtype we test and a wrong element is a real bug, not rounding.
"""

from dataclasses import dataclass

import numpy as np

from playground.collectives.bench_report import build_row
from playground.collectives.check import ROOT, SENTINEL, busbw_factor, expected_output, pattern
from playground.collectives.ops import ReduceOp
from playground.core.dtypes import resolve
from playground.core.errors import ScenarioError, UsageError

OPS = ("sum", "max", "min")
DTYPES = ("float32", "float64", "int32", "int64")
# What both workers run: every collective of ours but alltoallv (torch's all_to_all_single takes
# split sizes, MPI has Alltoallv; neither is wired here yet).
COLLECTIVES = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
)

__all__ = [  # with ROOT and pattern from collectives.check: what every rank sends, and the root
    "COLLECTIVES",
    "DTYPES",
    "OPS",
    "ROOT",
    "SENTINEL",
    "Layout",
    "bus_factor",
    "combine",
    "expected",
    "layout",
    "layouts",
    "median_us",
    "pattern",
    "validate",
]


@dataclass(frozen=True)
class Layout:
    """How many elements one rank puts in and gets out for one requested size."""

    collective: str
    nranks: int
    itemsize: int
    in_count: int
    out_count: int

    @property
    def count(self) -> int:
        """Elements counted as nccl-tests does: the larger of the per-rank input and output."""
        return max(self.in_count, self.out_count)

    @property
    def size_bytes(self) -> int:
        return self.count * self.itemsize


def validate(
    collective: str, dtype: str, op: str, ranks: int, sizes: list[int], iters: int, warmup: int
) -> None:
    """Raise ScenarioError (one line, names what is allowed) before any process starts."""
    checks = [
        (collective in COLLECTIVES, f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}"),
        (dtype in DTYPES, f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}"),
        (op in OPS, f"unknown op {op!r}; allowed: {', '.join(OPS)}"),
        (isinstance(ranks, int) and 1 <= ranks <= 64, f"ranks must be an integer 1-64, got {ranks!r}"),
        (
            bool(sizes) and all(isinstance(s, int) and s > 0 for s in sizes),
            f"sizes must be a non-empty list of positive byte counts, got {sizes!r}",
        ),
        (isinstance(iters, int) and iters >= 1, f"iters must be >= 1, got {iters!r}"),
        (isinstance(warmup, int) and warmup >= 0, f"warmup must be >= 0, got {warmup!r}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ScenarioError(message)


def layout(collective: str, size_bytes: int, nranks: int, dtype: str) -> Layout:
    itemsize = resolve(dtype).itemsize
    per_rank = size_bytes // (itemsize * nranks)
    if collective in ("allgather", "gather"):
        return Layout(collective, nranks, itemsize, per_rank, per_rank * nranks)
    if collective in ("reduce_scatter", "scatter"):
        return Layout(collective, nranks, itemsize, per_rank * nranks, per_rank)
    if collective == "alltoall":
        return Layout(collective, nranks, itemsize, per_rank * nranks, per_rank * nranks)
    count = size_bytes // itemsize
    return Layout(collective, nranks, itemsize, count, count)


def layouts(collective: str, sizes: list[int], nranks: int, dtype: str) -> list[Layout]:
    """One layout per distinct real size; sizes too small for one element per rank are dropped."""
    out: dict[int, Layout] = {}
    for size in sizes:
        lay = layout(collective, size, nranks, dtype)
        if lay.in_count > 0 and lay.out_count > 0:
            out.setdefault(lay.size_bytes, lay)
    return [out[k] for k in sorted(out)]


def bus_factor(collective: str, nranks: int) -> float:
    """busbw / algbw, as nccl-tests defines it (the share of the data each link must carry)."""
    if collective not in COLLECTIVES:
        raise UsageError(f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")
    return busbw_factor(collective, nranks)


def expected(lay: Layout, rank: int, op: str, dtype: str) -> np.ndarray | None:
    """What rank `rank` must hold after the collective; None where it holds nothing (reduce, non-root).
    The closed form our own checks use, given each rank's input count."""
    return expected_output(lay.collective, rank, lay.nranks, lay.in_count, dtype, ReduceOp.parse(op))


def median_us(times_ns: list[int]) -> float:
    return float(np.median(np.asarray(times_ns, dtype=np.float64))) / 1000.0


def combine(
    algorithm: str, lays: list[Layout], dtype: str, op: str, per_rank: list[list[dict]]
) -> list[dict]:
    """Rows from every rank's records: time = max over ranks of the per-rank median (the slowest rank
    sets the pace of a collective), wrong = sum over ranks; the in-place figures in the `ip_`
    columns, and a form the library does not offer as None (shown "-")."""
    rows = []
    for lay in lays:
        recs = [
            next((r for r in recs if r.get("size") == lay.size_bytes and "phase" not in r), None)
            for recs in per_rank
        ]
        missing = [rank for rank, rec in enumerate(recs) if rec is None]
        if missing:
            raise UsageError(f"ranks {missing} reported nothing for size {lay.size_bytes}")
        found = [rec for rec in recs if rec is not None]  # every rank's: none is missing
        rows.append(build_row(lay.collective, found, lay.size_bytes, lay.count, dtype, op, algorithm))
    return rows
