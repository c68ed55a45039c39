"""Inputs with a closed-form answer, so every rank can check a collective without communicating.

Rank r's input is a pattern of small integers ((7 i + 13 r) mod 17) - 8: every partial sum over up to
64 ranks is exact in every dtype, so the result must equal numpy's bit for bit, whatever the
reduction order.
"""

from dataclasses import dataclass

import numpy as np

from playground.collectives.chunks import ChunkBounds
from playground.collectives.ops import ReduceOp
from playground.collectives.registry import COLLECTIVES
from playground.core.errors import UsageError

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
