"""The calibration's patterns replayed in the simulator: the communicator's Python it times per message.

`calibrate` measures a message's CPU through the real communicator, so its Python (the send and
receive calls, their bookkeeping) is part of what it measures. A data-free simulation times the
ranks' own Python between the simulator's calls and charges it (SMPI's way with the code between MPI
calls), and that Python includes the same communicator calls: charged twice, once in the calibrated
cost and once as timed. Replaying each pattern on simulated ranks whose messages cost nothing leaves
only the timed Python, which the simulator's host then takes off each message it times
(`HostModel.timed_python_s`); `calibrate` records it beside the patterns.
"""

from playground.collectives.chunks import phantom
from playground.comm.patterns import MESSAGES_PER_UNIT, timed
from playground.models.contention import HostModel, MessageCosts
from playground.models.costs import Link
from playground.sim.driver import few_collections
from playground.sim.network import Machine
from playground.sim.transport import SimWorld

REPLAYS = 5  # the median of five: a replay is ~10 ms and timing it is noisy
REPS = 100  # round trips or windows a replay runs


def timed_python_s(pattern: str, size: int = 64, reps: int = REPS) -> float:
    """The Python a data-free simulation times per message of the calibration's `pattern` between two
    ranks (each message's sending and receiving side): the median of REPLAYS replays."""
    free = HostModel(
        (MessageCosts(0, 0.0, 0.0, 0.0, 0.0, 0.0),), cores=2, gamma_bytes_per_s=1e30, python_scale=1.0
    )
    link = Link(0.0, 1e30)
    machine = Machine(1, 2, link, link, free.gamma_bytes_per_s, None, free)
    per_unit = MESSAGES_PER_UNIT[pattern]
    times = []
    for _ in range(REPLAYS):
        world = SimWorld(machine, data=False)

        def rank(comm, world=world):
            buf, out = phantom(size, "uint8"), phantom(size, "uint8")
            timed(comm, pattern, comm.rank ^ 1, buf, out, 3)  # warm-up, as the calibration's
            start = world.time_of(comm.rank)
            timed(comm, pattern, comm.rank ^ 1, buf, out, reps)
            return world.time_of(comm.rank) - start

        with few_collections():  # as a simulation runs
            times.append(max(world.run(rank)) / (reps * per_unit))
    return sorted(times)[len(times) // 2]
