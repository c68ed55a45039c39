"""One row of a collectives benchmark on one rank, timed as nccl-tests times it.

Per (algorithm, size): warm-up calls, then timed calls each after a barrier, each recorded as one
trace event. Every call's result, warm-up included, is checked against the closed form (nccl-tests'
#wrong), after the call's timing has been taken: a corrupted message fails the run whichever call
it lands in. After a timed call the ranks meet again before they check, so the check adds wall time
but not measured time: without it, a rank done first compares its result (two passes over the
buffer) while a slower one is still in its timed call, and with more ranks than cores or a
memory-bound size that slowed the slowest rank's median by 11-16% (16 MiB, 2-8 ranks, shm). `p`
is the collective node's Params (or anything with its fields).
"""

import numpy as np
import numpy.ma  # noqa: F401 - np.median imports it on first use: once here, before the fork, not in every rank

from playground.collectives import ReduceOp, run_collective
from playground.collectives.auto import choose_allreduce, choose_alltoall
from playground.collectives.check import Tally, expected_output, input_count, make_input, reported_count
from playground.core.dtypes import resolve
from playground.tracing.trace import CAT_OP


def measure(comm, p, algorithm: str, size_bytes: int, inplace: bool = False) -> dict:
    """{size, count, algorithm, median_us, mean_us, min_us, wrong[, first_wrong]} of `algorithm` at
    `size_bytes`; in place, the input is refilled (untimed) before each call. Every call's result,
    warm-up included, is checked against the closed form after its timing (`check.Tally`)."""
    itemsize = resolve(p.dtype).itemsize
    count = input_count(p.collective, size_bytes, itemsize, comm.size)
    op = ReduceOp.parse(p.op)
    counts = getattr(p, "counts", None)  # alltoallv's layout, if the scenario gives one
    x = make_input(p.collective, comm.rank, comm.size, count, p.dtype, inplace)
    want = (
        expected_output(p.collective, comm.rank, comm.size, count, p.dtype, op, counts) if p.check else None
    )
    tally = Tally(warmup=p.warmup)
    work = x.copy() if inplace else x  # in place: refilled with the input (untimed) before each call
    times_us = []
    clock_ns = comm.tracer.clock_ns  # the rank's time source, as its message events use; read bare
    collective, seg, per_node = p.collective, p.segment_bytes, p.ranks_per_node  # read outside the span
    for it in range(p.warmup + p.iters):
        timed = it >= p.warmup
        if inplace:
            np.copyto(work, x)
        if timed:
            comm.barrier()
            t0_ns = clock_ns()
        out = run_collective(comm, collective, work, op, algorithm, seg, inplace, per_node, counts)
        if timed:
            t1_ns = clock_ns()
            dur = (t1_ns - t0_ns) / 1000.0
            times_us.append(dur)
            comm.tracer.add(
                p.collective,
                CAT_OP,
                t0_ns / 1000.0,
                dur,
                {
                    "bytes": count * itemsize,
                    "iter": it - p.warmup,
                    "algorithm": algorithm,
                    "inplace": inplace,
                },
            )
        if p.check:
            if timed:
                comm.barrier()  # every rank's timed call is over before any rank reads its result
            tally.check(out, want, it)
        del out  # before the next call allocates its result: the peak stays one result
    comm.tracer.flush()
    total = reported_count(p.collective, count, comm.size)
    return {
        "size": total * itemsize,
        "count": total,
        "algorithm": algorithm + auto_choice(comm, p.collective, algorithm, count * itemsize),
        "median_us": float(np.median(times_us)),
        "mean_us": float(np.mean(times_us)),
        "min_us": float(np.min(times_us)),
        **(tally.record() if p.check else {"wrong": -1}),
    }


def auto_choice(comm, collective: str, algorithm: str, size_bytes: int) -> str:
    """'->rd': what `auto` ran at this size (its row's algorithm then reads 'auto->rd'); '' otherwise."""
    if algorithm != "auto":
        return ""
    if collective == "allreduce":
        return "->" + choose_allreduce(size_bytes, comm.size)
    if collective == "alltoall":
        return "->" + choose_alltoall(size_bytes, comm.size, getattr(comm, "alltoall_picks", None))
    return ""
