"""One simulated measurement: a collective of S bytes on N ranks, timed as `bench` times it.

Each rank fills its input (the closed-form pattern of playground.collectives.check with data, a
phantom array without) and at virtual time 0, all together, runs the collective through
`run_collective`, exactly the code a launched rank runs, and records its virtual time and its
wrong-element count. On a calibrated host (`machine.host`) the ranks run it as `bench` times them
(collectives/measure.py): a warm-up call (its Python, timed by the simulator, then runs warm, as a
real run's timed calls do), the communicator's barrier, then the timed call: a rank's time runs from
when it leaves the barrier, so the barrier's skew (the last rank to arrive leaves first) is in it,
as in a real run; elsewhere simulated ranks start at the same instant, as the closed forms do. The row
is built by the same `build_row` as bench's and the baselines', so its keys are theirs.
"""

import gc
from contextlib import contextmanager
from pathlib import Path

from playground.collectives import ReduceOp, run_collective
from playground.collectives.bench_report import build_row
from playground.collectives.check import Tally, expected_output, input_count, make_input, reported_count
from playground.collectives.chunks import phantom
from playground.core.dtypes import resolve
from playground.sim.fold import symmetry
from playground.sim.network import Machine
from playground.sim.transport import SimWorld
from playground.tracing.trace import CAT_OP

# With a calibrated host the ranks' own Python is timed as it runs, and one call's timing can catch a
# hiccup (a page fault, a cache the last call left cold); as bench does, the median of a few calls.
HOST_CALLS = 5
DATA_MAX_RANKS = 64
DATA_MAX_BYTES = 1 << 20  # with data (and checked) by default up to here; data-free beyond


def wants_data(num_ranks: int, size_bytes: int) -> bool:
    """The default mode: real bytes (checked results) for small runs, sizes only beyond."""
    return num_ranks <= DATA_MAX_RANKS and size_bytes <= DATA_MAX_BYTES


@contextmanager
def few_collections():
    """Thousands of greenlets keep many objects alive: full collections would scan them all for
    nothing (a simulation makes no reference cycles worth collecting while it runs)."""
    old = gc.get_threshold()
    gc.set_threshold(200_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def simulate(
    machine: Machine,
    collective: str,
    algorithm: str,
    size_bytes: int,
    dtype: str = "float32",
    op: str = "sum",
    data: bool = True,
    segment_bytes: int | None = None,
    trace_dir: Path | None = None,
    trace_messages: bool = True,
    progress=None,
    fold: bool = False,
) -> tuple[dict, SimWorld]:
    """(nccl-tests row, the finished world) of one collective in virtual time; with `fold`, one
    rank runs for all where fold.py shows their timelines are the same (`world.folded`)."""
    n = machine.num_ranks
    itemsize = resolve(dtype).itemsize
    count = input_count(collective, size_bytes, itemsize, n)
    reduce_op = ReduceOp.parse(op)
    world = SimWorld(
        machine, data=data, fold=symmetry(machine, collective, algorithm, count, data) if fold else 0
    )
    world.engine.progress = progress

    def call(comm, x):
        return run_collective(
            comm, collective, x, reduce_op, algorithm, segment_bytes, ranks_per_node=machine.ranks_per_node
        )

    def body(comm):
        x = make_input(collective, comm.rank, n, count, dtype) if data else phantom(count, dtype)
        calls = 1
        if machine.host is not None:  # as bench: a warm-up call (timed Python runs warm), then timed calls
            call(comm, x)
            calls = HOST_CALLS
        times = []
        for _ in range(calls):
            if machine.host is not None:
                comm.barrier()
            t0 = world.time_of(comm.rank)  # without a host: 0 on every rank, they all enter together
            with comm.tracer.span(collective, CAT_OP, bytes=count * itemsize, algorithm=algorithm):
                out = call(comm, x)
            times.append(world.time_of(comm.rank) - t0)
        record = {"median_us": sorted(times)[len(times) // 2] * 1e6, "wrong": -1}
        if data:
            tally = Tally()
            tally.check(out, expected_output(collective, comm.rank, n, count, dtype, reduce_op), 0)
            record.update(tally.record())
        return record

    with few_collections():
        per_rank = world.run(
            body, trace_dir=None if world.folded else trace_dir, trace_messages=trace_messages
        )
    total = reported_count(collective, count, n)
    row = build_row(collective, per_rank, total * itemsize, total, dtype, op, algorithm)
    return {"ranks": n, **row}, world
