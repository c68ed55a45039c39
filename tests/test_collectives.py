"""Collective algorithms: pure schedules, then the full correctness grid over in-process ranks."""

import numpy as np
import pytest

from playground.collectives import (
    ReduceOp,
    allgather,
    allreduce,
    broadcast,
    reduce,
    reduce_scatter,
    run_collective,
)
from playground.collectives.check import expected_result, pattern
from playground.collectives.chunks import ChunkBounds, segment_bounds
from playground.collectives.ring import allgather_step, reduce_scatter_step
from playground.collectives.tree import bcast_schedule, reduce_schedule
from playground.comm.world import run_local

WORLD_SIZES = [1, 2, 3, 4, 5, 7, 8, 13]


def test_chunk_bounds_cover_everything_once():
    for count in (0, 1, 7, 8, 9, 1001):
        for n in (1, 3, 8, 13):
            b = ChunkBounds(count, n)
            assert len(b) == n and b[0][0] == 0 and b[-1][1] == count
            assert all(b[i][1] == b[i + 1][0] for i in range(n - 1))


def test_segment_bounds():
    assert segment_bounds(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert segment_bounds(5, 5, 4) == [(5, 5)]  # an empty chunk is still one (empty) message


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_ring_schedule_reduces_each_chunk_once_per_rank(n):
    # Simulate who holds which contributions: after reduce-scatter rank r owns all n contributions of chunk r.
    held = [[{r} for _ in range(n)] for r in range(n)]  # held[rank][chunk] = contributing ranks
    for step in range(n - 1):
        sends = {r: reduce_scatter_step(r, n, step) for r in range(n)}
        snapshot = [[set(c) for c in h] for h in held]
        for r in range(n):
            send_chunk, _ = sends[r]
            right = (r + 1) % n
            _, recv_chunk = sends[right]
            assert recv_chunk == send_chunk, "right neighbour must expect the chunk this rank sends"
            assert not snapshot[right][recv_chunk] & snapshot[r][send_chunk], "a contribution counted twice"
            held[right][recv_chunk] |= snapshot[r][send_chunk]
    for r in range(n):
        assert held[r][r] == set(range(n))
    # all-gather starts from the owned chunk and passes each chunk on exactly once
    for r in range(n):
        recvd = [allgather_step(r, n, s)[1] for s in range(n - 1)]
        assert sorted(recvd + [r]) == list(range(n))


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_tree_schedule_is_a_spanning_tree(n):
    parents = {}
    for v in range(n):
        children, parent = reduce_schedule(v, n)
        parents[v] = parent
        for c in children:
            assert reduce_schedule(c, n)[1] == v
        assert bcast_schedule(v, n)[0] == parent
    assert parents[0] is None and all(parents[v] is not None for v in range(1, n))


def _grid(algorithm, n, segment_bytes, inplace=False):
    def body(comm):
        out = []
        for dtype in ("float32", "float64", "int32", "int64"):
            for op in ReduceOp:
                if op is ReduceOp.PROD:
                    continue
                for count in sorted({0, 1, max(0, n - 1), n + 1, 257}):
                    x = pattern(comm.rank, count, dtype)
                    y = allreduce(comm, x, op, algorithm, segment_bytes, inplace=inplace)
                    assert (y is x) == inplace
                    out.append(((dtype, op, count), y.copy()))
        return out

    results = run_local(n, body)
    for k, ((dtype, op, count), _) in enumerate(results[0]):
        want = expected_result(n, count, dtype, op)
        for r in range(n):
            got = results[r][k][1]
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (
                algorithm,
                n,
                dtype,
                op,
                count,
                r,
            )


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_allreduce_grid_bit_identical(algorithm, n):
    _grid(algorithm, n, segment_bytes=1 << 20)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_allreduce_grid_multi_segment(algorithm, n):
    _grid(algorithm, n, segment_bytes=8)  # 1-2 elements a message: every multi-segment path runs


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("segment_bytes", [8, 1 << 20])
def test_allreduce_in_place_grid(algorithm, n, segment_bytes):
    """The result lands in the input array itself, equal to the out-of-place result."""
    _grid(algorithm, n, segment_bytes=segment_bytes, inplace=True)


def test_in_place_needs_a_writable_contiguous_array():
    with pytest.raises(ValueError, match="in-place all-reduce needs a writable C-contiguous numpy array"):
        run_local(2, lambda comm: allreduce(comm, np.ones((4, 4))[:, 1], inplace=True))
    with pytest.raises(
        ValueError,
        match="allgather: only allreduce, broadcast, reduce, alltoall, gather, scatter, sendrecv work in place",
    ):
        run_local(1, lambda comm: run_collective(comm, "allgather", np.ones(4), inplace=True))


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_other_collectives(n):
    count = 11

    def body(comm):
        x = pattern(comm.rank, count, "float64")
        return (
            broadcast(comm, x, root=n - 1),
            reduce(comm, x, "max", root=n // 2),
            allgather(comm, x),
            reduce_scatter(comm, x, "sum", segment_bytes=16),
        )

    results = run_local(n, body)
    total = expected_result(n, count, "float64", ReduceOp.SUM)
    bounds = ChunkBounds(count, n)
    for r, (b, red, ag, rs) in enumerate(results):
        assert np.array_equal(b, pattern(n - 1, count, "float64"))
        if r == n // 2:
            assert np.array_equal(red, expected_result(n, count, "float64", ReduceOp.MAX))
        else:
            assert red is None
        assert np.array_equal(ag, np.concatenate([pattern(q, count, "float64") for q in range(n)]))
        assert np.array_equal(rs, total[bounds[r][0] : bounds[r][1]])


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_in_place_broadcast_and_reduce_write_into_the_input(n):
    """As MPI_IN_PLACE: the broadcast overwrites every rank's own array with the root's, the reduce
    puts the result in the root's array (the others' are scratch); both return that array."""

    def body(comm):
        out = []
        for count in (0, 1, n + 1, 37):
            b = pattern(comm.rank, count, "float64")
            got_b = run_collective(comm, "broadcast", b, inplace=True, segment_bytes=16)
            r = pattern(comm.rank, count, "float64")
            got_r = run_collective(comm, "reduce", r, "max", inplace=True, segment_bytes=16)
            out.append((count, b, got_b is b, r, got_r is r if comm.rank == 0 else got_r))
        return out

    for rank, cases in enumerate(run_local(n, body)):
        for count, b, same_b, r, got_r in cases:
            assert same_b and np.array_equal(b, pattern(0, count, "float64"))
            if rank == 0:
                assert got_r is True and np.array_equal(r, expected_result(n, count, "float64", ReduceOp.MAX))
            else:
                assert got_r is None


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("segment_bytes", [16, None])
def test_in_place_reduce_scatter_then_all_gather_is_an_all_reduce(n, segment_bytes):
    """ZeRO's pair: each rank's reduced chunk lands where it lies in its own buffer (the other
    chunks untouched), and the in-place all-gather fills the rest, chunks cut alike even when the
    count is not a multiple of N."""
    for count in (0, 1, n - 1, n + 1, 37):

        def body(comm, count=count):
            x = pattern(comm.rank, count, "float64")
            before = x.copy()
            shard = reduce_scatter(comm, x, "sum", segment_bytes=segment_bytes, inplace=True)
            a, b = ChunkBounds(count, comm.size)[comm.rank]
            owned = np.shares_memory(shard, x) or shard.size == 0
            untouched = np.array_equal(np.delete(x, np.arange(a, b)), np.delete(before, np.arange(a, b)))
            out = allgather(comm, x, segment_bytes=segment_bytes, inplace=True)
            return owned, untouched, shard.copy(), out is x, x

        total = expected_result(n, count, "float64", ReduceOp.SUM)
        bounds = ChunkBounds(count, n)
        for r, (owned, untouched, shard, same, x) in enumerate(run_local(n, body)):
            assert owned and untouched and same
            assert np.array_equal(shard, total[bounds[r][0] : bounds[r][1]])
            assert np.array_equal(x, total)


def test_unknown_algorithm_is_rejected():
    with pytest.raises(ValueError, match="allowed: ring, tree, hd, rd, hier, auto"):
        run_local(1, lambda comm: allreduce(comm, np.ones(3), algorithm="bogus"))


def test_auto_picks_by_size():
    """The rule, not the table's measured numbers: every band names a real algorithm and auto
    picks it up to the band's edge; the picks move one way as messages grow (no algorithm comes
    back once left); the smallest messages get the fewest sequential steps (the latency-bound
    choice on an alpha-only link), the largest the ring."""
    from playground.collectives import registry
    from playground.collectives.auto import CROSSOVERS, choose_allreduce
    from playground.models.costs import Link

    assert choose_allreduce(8, 8) == "rd" and choose_allreduce(4096, 3) == "rd"
    assert all(choose_allreduce(16 << 20, n) == "ring" for n in (1, 2, 5, 8, 64))
    real = registry.names("allreduce", auto=False)
    flat = {a: registry.get("allreduce", a).cost for a in registry.flat_allreduce()}
    alpha_only = Link(alpha_s=1.0, beta_bytes_per_s=1e30)
    fewest_ranks = 1
    for max_ranks, bands in CROSSOVERS:
        edges = [below for below, _ in bands]
        assert edges == sorted(set(edges)) and edges[0] > 0, bands
        for n in {fewest_ranks, max_ranks if max_ranks <= 64 else 64}:
            for k, (below, algorithm) in enumerate(bands):
                assert algorithm in real, algorithm
                after = bands[k + 1][1] if k + 1 < len(bands) else "ring"
                assert (choose_allreduce(below - 1, n), choose_allreduce(below, n)) == (algorithm, after)
        fewest_ranks = max_ranks + 1
    assert CROSSOVERS[-1][0] >= 64  # every rank count a scenario allows has its bands
    for n in range(1, 65):
        picks = [choose_allreduce(1 << k, n) for k in range(31)]
        runs = [a for i, a in enumerate(picks) if i == 0 or a != picks[i - 1]]
        assert len(runs) == len(set(runs)), (n, runs)  # monotone: never back to an earlier one
        assert runs[-1] == "ring" and choose_allreduce(1 << 30, n) == "ring"
        if n >= 2:
            steps = {a: f(8, n, alpha_only) for a, f in flat.items()}
            assert steps[choose_allreduce(8, n)] == min(steps.values()), (n, steps)


@pytest.mark.parametrize("n", [3, 8])
def test_auto_grid(n):
    _grid("auto", n, segment_bytes=1 << 20)
