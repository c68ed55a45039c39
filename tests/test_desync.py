"""Ranks that call different collectives (another op, size, dtype or collective) fail at once, on
every rank, naming both sides (comm/desync.py): over every transport, in process and launched."""

import time

import numpy as np
import pytest

from playground.cli.testing import run_scenario
from playground.collectives import ReduceOp, allreduce, broadcast
from playground.comm import optags
from playground.comm.world import run_local
from playground.core.errors import CollectiveMismatch, PlaygroundError
from playground.models.costs import PRESETS
from playground.sim.network import Machine
from playground.sim.transport import SimWorld

pytestmark = pytest.mark.timeout(60)


def odd_call(comm, x, differ):
    """Rank 1's second call; the others all-reduce `x` with sum."""
    if comm.rank != 1:
        return allreduce(comm, x)
    if differ == "op":
        return allreduce(comm, x, op=ReduceOp.MAX)
    if differ == "dtype":
        return allreduce(comm, x.view(np.int32))
    if differ == "size":
        return allreduce(comm, np.ones(x.size + 1, x.dtype))
    return broadcast(comm, x)


SIDES = {  # what rank 1's side of the line says
    "op": "allreduce ring (max, float32, 64 bytes)",
    "dtype": "allreduce ring (sum, int32, 64 bytes)",
    "size": "allreduce ring (sum, float32, 68 bytes)",
    "collective": "broadcast tree (float32, 64 bytes)",
}
MINE = "allreduce ring (sum, float32, 64 bytes)"


def mismatched(n: int, differ: str, errors: dict):
    def body(comm):
        x = np.ones(16, np.float32)
        try:
            allreduce(comm, x)
            odd_call(comm, x, differ)
        except PlaygroundError as e:
            errors[comm.rank] = (e, time.monotonic())
            raise
        return True

    return body


@pytest.mark.parametrize("kind", ["local", "shm", "ipc", "tcp"])
@pytest.mark.parametrize("differ", list(SIDES))
def test_a_mismatch_is_an_error_on_every_rank_naming_both_sides(kind, differ, tmp_path):
    errors: dict = {}
    t0 = time.monotonic()
    with pytest.raises(CollectiveMismatch):
        run_local(3, mismatched(3, differ, errors), timeout_s=20, transport=kind, directory=str(tmp_path))
    assert sorted(errors) == [0, 1, 2]
    for rank, (e, at) in errors.items():
        assert at - t0 < 5, f"rank {rank} found out after {at - t0:.1f}s"
        text = str(e)
        assert SIDES[differ] in text and MINE in text, text  # both sides, whoever found it
    # rank 1 (the odd one) names what it called and a neighbour's call
    assert isinstance(errors[1][0], CollectiveMismatch) and errors[1][0].mine["name"] in (
        "allreduce",
        "broadcast",
    )


@pytest.mark.parametrize("data", [True, False])
def test_a_mismatch_in_the_simulator_is_named_not_a_deadlock(data):
    world = SimWorld(Machine(3, 1, PRESETS["ib"], PRESETS["ib"]), data=data)
    with pytest.raises(CollectiveMismatch, match=r"called allreduce ring \(sum.*called allreduce ring \(max"):
        world.run(mismatched(3, "op", {}), timeout_s=5)


def test_the_same_collectives_pass_and_labels_are_not_checked(tmp_path):
    """Matched collectives that agree run as before; an unmatched region (a label) around different
    point-to-point work on each rank is not a mismatch."""

    def body(comm):
        x = np.arange(8, dtype=np.float64)
        with comm.collective(f"stage {comm.rank}: its own sends"):  # a label: names differ by rank
            if comm.rank == 0:
                comm.send(x, 1, tag=5)
            else:
                comm.recv(0, tag=5)
        return allreduce(comm, x).tolist()

    assert run_local(2, body, transport="shm", directory=str(tmp_path)) == [list(np.arange(8.0) * 2)] * 2


def test_salted_tags_round_trip():
    for tag in (-(optags.TAG_LIMIT - 1), -65536 * 15 - 300, -10, -1, 0, 7100, optags.TAG_LIMIT - 1):
        for salt in (1, 2, 127, 128, 1023):
            wire = optags.salted(tag, salt)
            assert optags.is_salted(wire) and optags.salt_of(wire) == salt and optags.logical_tag(wire) == tag
            assert -(1 << 31) <= wire < 0  # an i32 on every wire
        assert not optags.is_salted(tag) and optags.logical_tag(tag) == tag
    assert optags.salted(optags.TAG_MISMATCH, 5) == optags.TAG_MISMATCH


@pytest.mark.timeout(90)
def test_a_launched_mismatch_fails_every_rank_within_seconds(runs_dir):
    t0 = time.monotonic()
    code, result, out, err = run_scenario(
        "desync", runs_dir, ranks=4, sets=["params.differ=dtype", "params.at=2"], timeout_s=60
    )
    assert code == 1, out + err
    assert time.monotonic() - t0 < 30
    both = ("allreduce ring (sum, float32, 4096 bytes)", "allreduce ring (sum, int32, 4096 bytes)")
    failures = result["failures"]
    assert len(failures) == 4 and "CollectiveMismatch" in failures[0]
    for r in range(4):  # every rank's own line names both calls (the others through the abort's reason)
        line = next(f for f in failures if f.startswith(f"rank {r} "))
        assert all(side in line for side in both), line
    assert "first disagreement" in err and "rank 1: allreduce ring #3 (sum, int32, 4096 B)" in err
