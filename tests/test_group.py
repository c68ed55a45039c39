"""Process groups (comm/group.py): split, new_group and the data x pipeline x tensor grid; every
collective and algorithm on a group, over every transport and the simulator, checked against numpy."""

import numpy as np
import pytest

from playground.collectives import allgather, allreduce, broadcast, reduce, reduce_scatter
from playground.collectives.registry import flat_allreduce
from playground.comm.group import Grid, GridShape, Group, new_group, split
from playground.comm.registry import IN_PROCESS
from playground.comm.world import run_local
from playground.core.errors import CommTimeout, PeerLost, UsageError
from playground.models.costs import PRESETS
from playground.sim.network import Machine
from playground.sim.transport import SimWorld

ALGORITHMS = list(flat_allreduce())


def _values(rank: int, count: int = 37) -> np.ndarray:
    return np.arange(count, dtype=np.float64) * (rank + 1) + rank


def test_grid_shape_numbers_tensor_fastest_then_data_then_pipeline():
    shape = GridShape(data=2, pipeline=3, tensor=2)
    assert [shape.coords(r) for r in range(4)] == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
    assert all(shape.rank_of(*shape.coords(r)) == r for r in range(shape.size))
    assert shape.members(5, "tensor") == [4, 5]
    assert shape.members(5, "data") == [5, 7]
    assert shape.members(5, "pipeline") == [1, 5, 9]
    # every axis partitions the ranks
    for axis in Grid.AXES:
        groups = {tuple(shape.members(r, axis)) for r in range(shape.size)}
        assert sorted(r for g in groups for r in g) == list(range(shape.size))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", IN_PROCESS)
def test_every_algorithm_on_both_axes_of_a_grid(transport, tmp_path):
    """2 x 2 (data x tensor) on 4 ranks: each group's all-reduce equals numpy over its members, with
    the two axes interleaved so their messages would mix if the tags did."""

    def body(comm):
        grid = Grid(comm, data=2, tensor=2)
        out = {}
        for algorithm in ALGORITHMS:
            for axis in ("tensor", "data", "tensor"):
                group = getattr(grid, axis)
                out[(algorithm, axis)] = allreduce(group, _values(comm.rank), algorithm=algorithm)
        return grid.shape, out

    results = run_local(4, body, transport=transport, directory=str(tmp_path), timeout_s=20)
    shape = results[0][0]
    for rank, (_, out) in enumerate(results):
        for (algorithm, axis), got in out.items():
            want = sum(_values(m) for m in shape.members(rank, axis))
            np.testing.assert_array_equal(got, want, err_msg=f"{algorithm} {axis} rank {rank}")


@pytest.mark.timeout(60)
def test_the_other_collectives_barrier_and_objects_on_a_group():
    def body(comm):
        group = split(comm, color=comm.rank % 2, key=-comm.rank)  # key reverses the order
        x = _values(comm.rank, 12)
        group.barrier()
        return {
            "members": group.members,
            "rank": group.rank,
            "bcast": broadcast(group, x.copy(), root=0),
            "reduce": reduce(group, x, root=1),
            "allgather": allgather(group, x),
            "reduce_scatter": reduce_scatter(group, x),
            "obj": group.bcast_obj({"from": comm.rank} if group.rank == 0 else None),
            "objs": group.allgather_obj(comm.rank),
        }

    results = run_local(6, body, timeout_s=20)
    assert results[0]["members"] == [4, 2, 0] and results[1]["members"] == [5, 3, 1]
    for rank, r in enumerate(results):
        members = r["members"]
        assert r["rank"] == members.index(rank)
        np.testing.assert_array_equal(r["bcast"], _values(members[0], 12))
        total = sum(_values(m, 12) for m in members)
        if r["rank"] == 1:
            np.testing.assert_array_equal(r["reduce"], total)
        np.testing.assert_array_equal(r["allgather"], np.concatenate([_values(m, 12) for m in members]))
        np.testing.assert_array_equal(r["reduce_scatter"], np.array_split(total, 3)[r["rank"]])
        assert r["obj"] == {"from": members[0]} and r["objs"] == members


@pytest.mark.timeout(60)
def test_new_group_nested_groups_and_a_simulated_grid():
    def body(comm):
        evens = new_group(comm, [0, 2, 4, 6], name="evens")
        if evens is None:
            return None
        halves = split(evens, color=evens.rank // 2)  # a group of a group
        y = allreduce(halves, _values(comm.rank), algorithm="rd")
        return halves.members, halves.rank, y  # members: ranks of the root communicator

    results = run_local(8, body, timeout_s=20)
    assert results[1] is None and results[7] is None
    for rank in (0, 2, 4, 6):
        world, local, y = results[rank]
        assert world == ([0, 2] if rank < 4 else [4, 6]) and world[local] == rank
        np.testing.assert_array_equal(y, sum(_values(m) for m in world))

    def grid_body(comm):
        grid = Grid(comm, data=2, pipeline=2, tensor=2)
        return [allreduce(getattr(grid, a), _values(comm.rank), algorithm="ring") for a in Grid.AXES]

    link = PRESETS["ib"]
    world = SimWorld(Machine(1, 8, link, link, link.gamma_bytes_per_s))
    for rank, outs in enumerate(world.run(grid_body)):
        for axis, got in zip(Grid.AXES, outs, strict=True):
            want = sum(_values(m) for m in GridShape(2, 2, 2).members(rank, axis))
            np.testing.assert_array_equal(got, want)


def test_bad_groups_are_one_clear_error():
    def body(comm):
        with pytest.raises(
            UsageError, match=r"grid data=2 x pipeline=1 x tensor=3 = 6 ranks, but the communicator has 4"
        ):
            Grid(comm, data=2, tensor=3)
        with pytest.raises(UsageError, match="rank 0 is not one of its members"):
            Group(comm, [1, 2], tag_offset=-(1 << 20))
        group = split(comm, color=0)
        with pytest.raises(UsageError, match=r"peer 4 is not a rank of the group \(0..3\)"):
            group.isend(np.zeros(1), 4)
        return True

    assert run_local(4, lambda comm: body(comm) if comm.rank == 0 else split(comm, 0) and True) == [True] * 4


@pytest.mark.timeout(30)
def test_a_missing_member_times_out_naming_the_groups_collective():
    def body(comm):
        grid = Grid(comm, data=1, tensor=2)
        if comm.rank == 1:
            return None
        try:
            allreduce(grid.tensor, np.ones(4), algorithm="ring")
        except (CommTimeout, PeerLost) as e:
            return str(e)

    results = run_local(2, body, timeout_s=1.0)
    assert "allreduce[tensor] ring" in results[0] and "rank 1" in results[0]


@pytest.mark.timeout(30)
def test_two_groups_of_the_same_ranks_never_take_each_others_messages():
    """Rank 0 sends on the first group, then the second; rank 1 receives in the other order."""

    def body(comm):
        first, second = new_group(comm, [0, 1], "first"), new_group(comm, [0, 1], "second")
        if comm.rank == 0:
            first.send(np.full(3, 1.0), 1)
            second.send(np.full(3, 2.0), 1)
            return None
        return second.recv(0).tolist(), first.recv(0).tolist()

    assert run_local(2, body, timeout_s=5)[1] == ([2.0] * 3, [1.0] * 3)


@pytest.mark.timeout(30)
def test_nested_groups_get_offsets_no_member_uses_even_when_only_some_ranks_nest():
    """Ranks 0 and 1 nest a group inside their pipeline group while 2 and 3 do not; then every rank
    makes one more group: the offsets still agree, and none repeats among groups sharing ranks."""

    def body(comm):
        grid = Grid(comm, data=2, pipeline=2)
        inner = (
            split(grid.pipeline, 0, name="inner") if comm.rank in grid.shape.members(0, "pipeline") else None
        )
        late = new_group(comm, [0, 1, 2, 3], "late")
        if comm.rank == 0:  # the same two ranks, three groups: sent in one order, taken in another
            for i, g in enumerate((grid.pipeline, inner, late)):
                g.send(np.full(2, float(i)), g.members.index(2))
        if comm.rank == 2:
            got = [g.recv(g.members.index(0)).tolist() for g in (late, inner, grid.pipeline)]
        else:
            got = None
        groups = [grid.data, grid.pipeline, grid.tensor, late, *([inner] if inner else [])]
        return [g.tag_offset for g in groups], [g.members for g in groups], got

    results = run_local(4, body, timeout_s=5)
    assert results[2][2] == [[2.0, 2.0], [1.0, 1.0], [0.0, 0.0]]
    for offsets, _, _ in results:
        assert len(set(offsets)) == len(offsets)
    late = {r[0][3] for r in results}
    assert len(late) == 1  # every rank agreed on the late group's offset
