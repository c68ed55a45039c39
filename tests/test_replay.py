"""The calibration's patterns replayed in the simulator: the communicator's Python a data-free
simulation times is already in the calibrated per-message CPU, so the host takes it off and a
simulated pattern costs what was calibrated, once."""

import dataclasses

import pytest

from playground.collectives.chunks import phantom
from playground.comm.patterns import MESSAGES_PER_UNIT, timed
from playground.models.contention import HostModel, MessageCosts
from playground.models.costs import Link
from playground.sim.network import Machine
from playground.sim.replay import timed_python_s
from playground.sim.transport import SimWorld

COST_S = 20e-6  # a message's calibrated CPU, both sides: several times the Python timed per message
REPS = 50


def _per_message_s(host: HostModel, pattern: str) -> float:
    link = Link(0.0, 1e30)
    world = SimWorld(Machine(1, 2, link, link, 1e30, None, host), data=False)

    def rank(comm):
        buf, out = phantom(64, "uint8"), phantom(64, "uint8")
        start = world.time_of(comm.rank)
        timed(comm, pattern, comm.rank ^ 1, buf, out, REPS)
        return world.time_of(comm.rank) - start

    return max(world.run(rank)) / (REPS * MESSAGES_PER_UNIT[pattern])


@pytest.mark.parametrize("pattern", ["pingpong", "pingping", "window"])
def test_the_replay_times_some_python_per_message_and_none_is_charged_where_python_is_not_timed(pattern):
    python_s = timed_python_s(pattern)
    assert 0 < python_s < 50e-6
    host = HostModel(
        (MessageCosts(0, COST_S / 2, 0.0, COST_S / 2, 0.0, 0.0),),
        cores=2,
        gamma_bytes_per_s=1e30,
        python_scale=0.0,  # Python not timed: nothing to take off, the calibrated cost whole
        timed_python_s=python_s,
    )
    assert _per_message_s(host, pattern) == pytest.approx(COST_S, rel=1e-9)


@pytest.mark.timing  # compares two timings of Python taken moments apart: a busy machine moves them
@pytest.mark.parametrize("pattern", ["pingpong", "pingping", "window"])
def test_a_simulated_pattern_costs_its_calibrated_cpu_once(pattern):
    python_s = timed_python_s(pattern)
    host = HostModel(
        (MessageCosts(0, COST_S / 2, 0.0, COST_S / 2, 0.0, 0.0),),
        cores=2,
        gamma_bytes_per_s=1e30,
        python_scale=1.0,
        timed_python_s=python_s,
    )
    assert _per_message_s(host, pattern) == pytest.approx(COST_S, rel=0.05)
    # without the replay's figure the communicator's Python counts twice: once calibrated, once timed
    twice = _per_message_s(dataclasses.replace(host, timed_python_s=0.0), pattern)
    assert twice == pytest.approx(COST_S + python_s, rel=0.05) and twice > COST_S * 1.08
