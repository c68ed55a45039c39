"""One row of a collectives benchmark on one rank, timed as nccl-tests times it.

Per (algorithm, size): warm-up calls, then timed calls each after a barrier, each recorded as one
trace event; several algorithms at one size take turns of a few calls each (`measure_in_turn`).
Every call's result, warm-up included, is checked against the closed form (nccl-tests' #wrong),
after the call's timing has been taken: a corrupted message fails the run whichever call it lands
in. After a timed call the ranks meet again before they check, so the check adds wall time but not
measured time: without it, a rank done first compares its result (two passes over the buffer)
while a slower one is still in its timed call, and with more ranks than cores or a memory-bound
size that slowed the slowest rank's median by 11-16% (16 MiB, 2-8 ranks, shm). `p` is the
collective node's Params (or anything with its fields).
"""

from collections.abc import Sequence

import numpy as np
import numpy.ma  # noqa: F401 - np.median imports it on first use: once here, before the fork, not in every rank

from playground.collectives import ReduceOp, run_collective
from playground.collectives.auto import choose_allreduce, choose_alltoall
from playground.collectives.check import Tally, expected_output, input_count, make_input, reported_count
from playground.core.dtypes import resolve
from playground.tracing.trace import CAT_OP


class Series:
    """The calls of one (algorithm, size[, in place]) row: `call(timed)` makes the next one,
    `untimed` of them first (warm-ups), then timed ones; `row()` is the row once they are made.
    Rows of several algorithms take turns (`measure_in_turn`)."""

    def __init__(
        self, comm, p, algorithm: str, size_bytes: int, inplace: bool = False, given=None, untimed: int = 0
    ):
        self.comm, self.p, self.algorithm, self.inplace = comm, p, algorithm, inplace
        itemsize = resolve(p.dtype).itemsize
        self.count = input_count(p.collective, size_bytes, itemsize, comm.size)
        self.itemsize = itemsize
        self.op = ReduceOp.parse(p.op)
        self.counts = getattr(p, "counts", None)  # alltoallv's layout, if the scenario gives one
        self.x, self.want = given if given is not None else self.inputs()
        self.untimed = untimed if untimed else p.warmup  # calls numbered as warm-ups by the tally
        self.tally = Tally(warmup=self.untimed)
        self.calls = 0
        self.work = self.x.copy() if inplace else self.x  # in place: refilled (untimed) before each call
        self.times_us: list[float] = []

    def inputs(self) -> tuple:
        """(input, expected output): what every series of this size and form can share."""
        p, comm = self.p, self.comm
        x = make_input(p.collective, comm.rank, comm.size, self.count, p.dtype, self.inplace)
        want = (
            expected_output(p.collective, comm.rank, comm.size, self.count, p.dtype, self.op, self.counts)
            if p.check
            else None
        )
        return x, want

    def call(self, timed: bool) -> None:
        """The next call, timed or not, its result checked after its timing."""
        comm, p = self.comm, self.p
        it = (
            len(self.times_us) + self.untimed
            if timed
            else min(self.calls - len(self.times_us), self.untimed - 1)
        )
        self.calls += 1
        if self.inplace:
            np.copyto(self.work, self.x)
        clock_ns = comm.tracer.clock_ns  # the rank's time source, as its message events use; read bare
        # everything the call takes, read before its timing starts
        args = (comm, p.collective, self.work, self.op, self.algorithm, p.segment_bytes, self.inplace)
        per_node, counts = p.ranks_per_node, self.counts
        if timed:
            comm.barrier()
            t0_ns = clock_ns()
        out = run_collective(*args, per_node, counts)
        if timed:
            t1_ns = clock_ns()
            dur = (t1_ns - t0_ns) / 1000.0
            self.times_us.append(dur)
            comm.tracer.add(
                p.collective,
                CAT_OP,
                t0_ns / 1000.0,
                dur,
                {
                    "bytes": self.count * self.itemsize,
                    "iter": len(self.times_us) - 1,
                    "algorithm": self.algorithm,
                    "inplace": self.inplace,
                },
            )
        if p.check:
            if timed:
                comm.barrier()  # every rank's timed call is over before any rank reads its result
            self.tally.check(out, self.want, it)
        del out  # before the next call allocates its result: the peak stays one result

    def row(self) -> dict:
        p, times_us = self.p, self.times_us
        total = reported_count(p.collective, self.count, self.comm.size)
        return {
            "size": total * self.itemsize,
            "count": total,
            "algorithm": self.algorithm
            + auto_choice(self.comm, p.collective, self.algorithm, self.count * self.itemsize),
            "median_us": float(np.median(times_us)),
            "mean_us": float(np.mean(times_us)),
            "min_us": float(np.min(times_us)),
            **(self.tally.record() if p.check else {"wrong": -1}),
        }


def measure(comm, p, algorithm: str, size_bytes: int, inplace: bool = False) -> dict:
    """{size, count, algorithm, median_us, mean_us, min_us, wrong[, first_wrong]} of `algorithm` at
    `size_bytes`; in place, the input is refilled (untimed) before each call. Every call's result,
    warm-up included, is checked against the closed form after its timing (`check.Tally`)."""
    return measure_in_turn(comm, p, [algorithm], size_bytes, inplace)[0]


def turns(iters: int, turn_calls: int, num_series: int) -> list[int]:
    """The timed calls of each turn: one turn of all `iters` for a single row or `turn_calls` 0,
    else turns of `turn_calls` (the last one what is left)."""
    if num_series < 2 or turn_calls <= 0 or turn_calls >= iters:
        return [iters]
    return [min(turn_calls, iters - k) for k in range(0, iters, turn_calls)]


def measure_in_turn(comm, p, algorithms: Sequence[str], size_bytes: int, inplace: bool = False) -> list[dict]:
    """`measure`'s row of each algorithm at one size, the algorithms taking turns of
    `p.turn_calls` timed calls each (the first after the warm-up calls, each later one after one
    more untimed call, which warms the caches and the code again): on a shared machine what slows
    it for a while reaches every algorithm alike, so their medians compare as one measurement's,
    as a benchmark alternates ours and the baseline's runs, while each timed call still follows
    calls of its own, as nccl-tests times an operation in a loop."""
    plan = turns(p.iters, getattr(p, "turn_calls", 0), len(algorithms))
    rewarm = 1 if p.warmup else 0
    untimed = p.warmup + rewarm * (len(plan) - 1)
    series: list[Series] = []
    for algorithm in algorithms:
        given = (series[0].x, series[0].want) if series else None
        series.append(Series(comm, p, algorithm, size_bytes, inplace, given, untimed))
    for k, timed in enumerate(plan):
        for one in series:
            for _ in range(p.warmup if k == 0 else rewarm):
                one.call(timed=False)
            for _ in range(timed):
                one.call(timed=True)
    comm.tracer.flush()
    return [one.row() for one in series]


def auto_choice(comm, collective: str, algorithm: str, size_bytes: int) -> str:
    """'->rd': what `auto` ran at this size (its row's algorithm then reads 'auto->rd'); '' otherwise."""
    if algorithm != "auto":
        return ""
    if collective == "allreduce":
        return "->" + choose_allreduce(size_bytes, comm.size)
    if collective == "alltoall":
        return "->" + choose_alltoall(size_bytes, comm.size, getattr(comm, "alltoall_picks", None))
    return ""
