"""The calibrated model's time of a collective on this machine, and its pick among the algorithms.

Where every rank has a core of its own the closed form (playground/models/costs.py, exchange_costs.py)
holds, priced on the calibrated link for the row's size (its size ranges; copy and reduction rates
for the footprint); where ranks outnumber the calibrated cores it does not, and the simulator on the
calibrated host (per-message CPU and latency, the cores shared with time slices) prices the row
instead. `bench`'s model columns use it (`model_by` says which priced a row), and so does `auto` for
the all-to-all: the algorithm the model finds fastest at each size (`pick_table`), worked out once
on rank 0 and handed to every rank (`install_alltoall_picks`), so that all ranks run the same one.
"""

import math
from collections.abc import Callable, Sequence

from playground.collectives import registry
from playground.models.calibration import ModelSource
from playground.sim.driver import simulate
from playground.sim.network import Machine
from playground.sim.transport import NO_SEGMENTS

Priced = tuple[float, str]  # (seconds, "closed form" | "sim")


def calibrated_model(model: ModelSource, collective: str, num_ranks: int) -> Callable | None:
    """With a calibrated model, (algorithm, size) -> (seconds, "closed form" | "sim"), or None for
    what neither models (an algorithm for nodes); without a calibration, None."""
    calibration = model.calibration
    if calibration is None:
        return None

    def seconds(algorithm: str, size: int) -> Priced | None:
        algo = registry.BY_KEY.get((collective, algorithm))
        if algo is None or algo.on_nodes:
            return None
        if num_ranks <= calibration.cores:
            link = calibration.link(model.transport, num_ranks, size)
            return algo.cost(size, num_ranks, link), "closed form"
        host = calibration.host(model.transport, num_ranks, size)
        machine = Machine(1, num_ranks, model.link, model.link, host.gamma_bytes_per_s, host.cores, host)
        segment = calibration.segment_bytes(model.transport) or NO_SEGMENTS
        row, _ = simulate(machine, collective, algorithm, size, data=False, segment_bytes=segment)
        return row["time_us"] * 1e-6, "sim"

    return seconds


def model_pick(seconds: Callable, algorithms: Sequence[str], size: int) -> str | None:
    """The algorithm `seconds` finds fastest at `size` (ties to the first listed); None if it prices none."""
    priced = {a: p[0] for a in algorithms if (p := seconds(a, size)) is not None}
    if not priced:
        return None
    fastest = min(priced.values())
    return next(a for a, t in priced.items() if t <= fastest * (1 + 1e-9))


def pick_table(seconds: Callable, algorithms: Sequence[str], sizes: Sequence[int]) -> list[list]:
    """[[from_bytes, algorithm], ...]: the model's pick at each of `sizes`, each band starting halfway
    (geometrically) from the size before; what `collectives.auto.choose_alltoall` reads."""
    table: list[list] = []
    previous = None
    for size in sorted(set(sizes)):
        pick = model_pick(seconds, algorithms, size)
        if pick is None:
            continue
        start = 0 if previous is None else int(math.sqrt(previous * max(size, 1)))
        if not table or table[-1][1] != pick:
            table.append([start, pick])
        previous = max(size, 1)
    return table


def install_alltoall_picks(comm, model: ModelSource, sizes: Sequence[int]) -> list[list] | None:
    """Collective: the calibrated model's all-to-all picks at `sizes` (bytes a rank puts in) for
    `comm`'s rank count, worked out on rank 0 and given to every rank as `comm.alltoall_picks`
    (what `alltoall(..., "auto")` then runs); None, and nothing installed, without a calibration."""
    table = None
    if comm.rank == 0:
        seconds = calibrated_model(model, "alltoall", comm.size)
        if seconds is not None:
            table = pick_table(seconds, registry.flat("alltoall"), sizes)
    table = comm.bcast_obj(table)
    if table is not None:
        comm.alltoall_picks = [tuple(band) for band in table]
    return table
