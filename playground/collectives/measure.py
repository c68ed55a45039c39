"""One row of a collectives benchmark on one rank, timed as nccl-tests times it.

Per (algorithm, size): warm-up calls, then timed calls each after a barrier, each recorded as one
trace event; several algorithms at one size take their calls in turn (`measure_in_turn`). Every call's result, warm-up included, is checked against the closed form (nccl-tests'
#wrong), after the call's timing has been taken: a corrupted message fails the run whichever call
it lands in. After a timed call the ranks meet again before they check, so the check adds wall time
but not measured time: without it, a rank done first compares its result (two passes over the
buffer) while a slower one is still in its timed call, and with more ranks than cores or a
memory-bound size that slowed the slowest rank's median by 11-16% (16 MiB, 2-8 ranks, shm). `p`
is the collective node's Params (or anything with its fields).
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
    """The calls of one (algorithm, size[, in place]) row: `call(it)` makes call number `it` (the
    first `warmup` untimed), `row()` is the row once they are all made. Rows of several algorithms
    can take their calls in turn (`measure_in_turn`)."""

    def __init__(self, comm, p, algorithm: str, size_bytes: int, inplace: bool = False, given=None):
        self.comm, self.p, self.algorithm, self.inplace = comm, p, algorithm, inplace
        itemsize = resolve(p.dtype).itemsize
        self.count = input_count(p.collective, size_bytes, itemsize, comm.size)
        self.itemsize = itemsize
        self.op = ReduceOp.parse(p.op)
        self.counts = getattr(p, "counts", None)  # alltoallv's layout, if the scenario gives one
        self.x, self.want = given if given is not None else self.inputs()
        self.tally = Tally(warmup=p.warmup)
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

    def call(self, it: int) -> None:
        """Call number `it` (timed from `warmup` on), its result checked after its timing."""
        comm, p = self.comm, self.p
        timed = it >= p.warmup
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
                    "iter": it - p.warmup,
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


def measure_in_turn(comm, p, algorithms: Sequence[str], size_bytes: int, inplace: bool = False) -> list[dict]:
    """`measure`'s row of each algorithm at one size, their calls taken in turn (one call of each,
    then the next of each): on a shared machine whatever slows it for a while (another process, the
    caches, the clock speed) reaches every algorithm alike, so their medians compare as one
    measurement's, as a benchmark alternates ours and the baseline's runs."""
    series: list[Series] = []
    for algorithm in algorithms:
        given = (series[0].x, series[0].want) if series else None
        series.append(Series(comm, p, algorithm, size_bytes, inplace, given))
    for it in range(p.warmup + p.iters):
        for one in series:
            one.call(it)
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
