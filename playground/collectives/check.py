"""Inputs with a closed-form answer, so every rank can check a collective without communicating.

Rank r's input is a pattern of small integers ((7 i + 13 r) mod 17) - 8: over any 17 consecutive
ranks element i takes every value from -8 to 8 once, so a partial sum over up to 68 ranks stays
within +-144, exact in every dtype (bfloat16 holds every integer to 256), and the result must equal
numpy's bit for bit, whatever the reduction order: nccl-tests' checks ask the same (exact sums in the
element type; they allow 2 units in the last place only for a floating `avg`, which NCCL
premultiplies and ours divides once: ops.py). The tolerance is 0.

The blocks that move without reduction (all-to-all, gather, scatter, send/recv) are checked the
same way: which rank's pattern, at which offset, each output element must hold.
"""

from dataclasses import dataclass

import numpy as np

from playground.collectives.chunks import ChunkBounds
from playground.collectives.ops import ReduceOp, average_into
from playground.collectives.registry import COLLECTIVES
from playground.core.dtypes import resolve
from playground.core.errors import UsageError

ROOT = 0
PERIOD = 17
SENTINEL = 99  # in-place gather: what a block not gathered yet holds (no rank's pattern has it)
PER_RANK = ("allgather", "gather")  # nccl-tests' size is the whole output: each rank puts in size / N
WHOLE_BLOCKS = ("alltoall", "scatter")  # the input is N equal blocks: its count a multiple of N
# nccl-tests' bus-bandwidth factors, (N-1)/N for these, 2(N-1)/N for all-reduce, 1 for the others
ONE_LINK_SHARE = ("allgather", "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter")


def pattern(rank: int, count: int, dtype, start: int = 0) -> np.ndarray:
    """Elements start..start+count-1 of rank `rank`'s input: ((7 i + 13 rank) mod 17) - 8 (periodic
    in i: built from one period, which keeps a 1 GiB input cheap to make)."""
    i = start + np.arange(PERIOD)
    cycle = (((7 * i + 13 * rank) % PERIOD) - 8).astype(resolve(dtype))
    return np.resize(cycle, count)


def expected_result(size: int, count: int, dtype, op: ReduceOp) -> np.ndarray:
    """The op-reduction over `size` ranks of their patterns of `count` elements (periodic too); avg
    divides the sum by `size` once, in `dtype`, as the collectives do (ops.average_into)."""
    acc = pattern(0, PERIOD, "int64")
    for r in range(1, size):
        op.ufunc(acc, pattern(r, PERIOD, "int64"), out=acc)
    result = acc.astype(resolve(dtype))
    if op.averages:
        average_into(result, size)
    return np.resize(result, count)


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each link carries relative to algbw."""
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ONE_LINK_SHARE:
        return (n - 1) / n
    return 1.0


def input_count(collective: str, size_bytes: int, itemsize: int, n: int) -> int:
    """Elements each rank passes in (out of place), with `size_bytes` as nccl-tests defines it for
    the collective: rounded down to a multiple of N where the input is N equal blocks."""
    total = size_bytes // itemsize
    if collective in PER_RANK:
        return total // n
    return total // n * n if collective in WHOLE_BLOCKS else total


def reported_count(collective: str, count: int, n: int) -> int:
    """A row's count as nccl-tests prints it, from each rank's input count: the whole output where
    each rank puts in a part of it."""
    return count * n if collective in PER_RANK else count


def make_input(collective: str, rank: int, n: int, count: int, dtype, inplace: bool = False) -> np.ndarray:
    """Rank `rank`'s input of `count` elements: its pattern; an in-place gather's is the whole
    output, this rank's block in its place and `SENTINEL` elsewhere (nccl-tests' in-place layout)."""
    if collective == "gather" and inplace:
        buf = np.full(count * n, SENTINEL, dtype=resolve(dtype))
        buf[rank * count : (rank + 1) * count] = pattern(rank, count, dtype)
        return buf
    return pattern(rank, count, dtype)


def uneven_counts(n: int, count: int) -> list[list[int]]:
    """The benchmark's alltoallv layout: row s holds what rank s sends each rank, adding up to `count`,
    in shares of weight (s + 2 d) mod 3 (0, 1 or 2: zeros included, every row some non-zero)."""
    out = []
    for s in range(n):
        weights = [(s + 2 * d) % 3 for d in range(n)] if n > 1 else [1]
        total = sum(weights)
        row = [count * w // total for w in weights]
        row[weights.index(max(weights))] += count - sum(row)
        out.append(row)
    return out


def expected_output(
    collective: str, rank: int, n: int, count: int, dtype, op: ReduceOp, counts=None
) -> np.ndarray | None:
    """What rank `rank` must hold after the collective on inputs of `count` elements (None: nothing).
    In place the same holds (an in-place gather's input is N blocks: pass its block's count).
    alltoallv's layout is `counts` (row s: what rank s sends each rank), else `uneven_counts`."""
    if collective == "allreduce":
        return expected_result(n, count, dtype, op)
    if collective in PER_RANK:
        gathered = np.concatenate([pattern(r, count, dtype) for r in range(n)]) if n else pattern(0, 0, dtype)
        return gathered if collective == "allgather" or rank == ROOT else None
    if collective == "reduce_scatter":
        a, b = ChunkBounds(count, n)[rank]
        return expected_result(n, count, dtype, op)[a:b]
    if collective == "broadcast":
        return pattern(ROOT, count, dtype)
    if collective == "reduce":
        return expected_result(n, count, dtype, op) if rank == ROOT else None
    if collective == "alltoall":
        c = count // n
        return np.concatenate([pattern(s, c, dtype, start=rank * c) for s in range(n)])
    if collective == "alltoallv":
        rows = counts if counts is not None else uneven_counts(n, count)
        return np.concatenate([pattern(s, rows[s][rank], dtype, start=sum(rows[s][:rank])) for s in range(n)])
    if collective == "scatter":
        c = count // n
        return pattern(ROOT, c, dtype, start=rank * c)
    if collective == "sendrecv":
        return pattern((rank - 1) % n, count, dtype)
    raise UsageError(f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")


def count_wrong(got: np.ndarray | None, want: np.ndarray | None) -> int:
    if want is None:
        return 0 if got is None else 1
    if got is None or got.shape != want.shape or got.dtype != want.dtype:
        return max(1, want.size)
    return int(np.count_nonzero(got != want))


def first_mismatch(got: np.ndarray | None, want: np.ndarray | None) -> dict:
    """Where `got` first differs from `want`: {"index", "got", "expected"} (index -1 when the
    shapes or dtypes differ, or one of them is missing); call it only when they differ."""
    if got is None or want is None or got.shape != want.shape or got.dtype != want.dtype:
        describe = lambda a: "nothing" if a is None else f"{a.dtype}{list(a.shape)}"  # noqa: E731
        return {"index": -1, "got": describe(got), "expected": describe(want)}
    flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    i = int(np.flatnonzero(flat_got != flat_want)[0])
    return {"index": i, "got": flat_got[i].item(), "expected": flat_want[i].item()}


@dataclass
class Tally:
    """Wrong elements summed over every checked call, and where the first wrong one was seen.

    Every iteration is checked, warm-up included (a corrupted message must fail the run whichever
    call it lands in); the caller checks outside its timed region. `first` is
    {"iteration", "warmup", "index", "got", "expected"}: `check` takes the call's number counting
    the warm-up first; `first` numbers it within its phase (warm-up, or timed)."""

    warmup: int = 0
    wrong: int = 0
    first: dict | None = None

    def check(self, got: np.ndarray | None, want: np.ndarray | None, iteration: int, **where) -> int:
        """Count `got`'s wrong elements against `want` (added to the tally); returns them. `where`
        (e.g. bucket=3) is kept with the first wrong element."""
        wrong = count_wrong(got, want)
        if wrong:
            self.wrong += wrong
            if self.first is None:
                warm = iteration < self.warmup
                when = {"iteration": iteration if warm else iteration - self.warmup, "warmup": warm}
                self.first = {**when, **where, **first_mismatch(got, want)}
        return wrong

    def record(self, prefix: str = "") -> dict:
        """The tally as a rank's record fields: `wrong`, and `first_wrong` when there is one."""
        out: dict[str, int | dict] = {prefix + "wrong": self.wrong}
        if self.first is not None:
            out[prefix + "first_wrong"] = self.first
        return out


_FIRST_KEYS = ("rank", "iteration", "warmup", "index", "got", "expected")


def describe_first_wrong(first: dict) -> str:
    """'first seen on rank 1 at warm-up iteration 0, bucket 2: element 17 is 3.0, expected 5.0'."""
    it = first["iteration"]
    where = f"warm-up iteration {it}" if first.get("warmup") else f"timed iteration {it}"
    where += "".join(f", {k} {v}" for k, v in first.items() if k not in _FIRST_KEYS)
    rank = f"on rank {first['rank']} " if "rank" in first else ""
    if first["index"] < 0:
        what = f"got {first['got']}, expected {first['expected']}"
    else:
        what = f"element {first['index']} is {first['got']!r}, expected {first['expected']!r}"
    return f"first seen {rank}at {where}: {what}"


def earliest_first_wrong(per_rank: list[dict], prefix: str = "") -> dict | None:
    """The first wrong element over every rank's record (in rank order): the earliest iteration
    (warm-up before timed), then the lowest rank, with that rank named in it."""
    seen = [
        {"rank": rank, **rec[prefix + "first_wrong"]}
        for rank, rec in enumerate(per_rank)
        if rec.get(prefix + "first_wrong")
    ]
    return min(seen, key=lambda f: (not f["warmup"], f["iteration"], f["rank"]), default=None)
