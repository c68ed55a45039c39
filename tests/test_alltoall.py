"""All-to-all: the three schedules (pairwise exchange, Bruck, scattered) as pure functions, then every
algorithm on in-process ranks against the closed form, alltoallv with uneven counts and zeros, in
a process group, and bad counts."""

import numpy as np
import pytest

from playground.collectives import ALGORITHMS, alltoall, alltoallv, bruck, chunks, run_collective
from playground.collectives.alltoall import check_counts
from playground.collectives.bruck import bruck_blocks, bruck_peers, bruck_steps, rotation, unrotation
from playground.collectives.check import count_wrong, expected_output, pattern, uneven_counts
from playground.collectives.chunks import packed_bounds
from playground.collectives.ops import ReduceOp
from playground.collectives.pairwise import pairwise_peers
from playground.collectives.scattered import recv_order, send_order
from playground.comm.group import split
from playground.comm.world import run_local
from playground.core.errors import MessageMismatch, UsageError

WORLD_SIZES = [1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_pairwise_steps_are_permutations_that_meet_every_peer_once(n):
    for step in range(1, n):
        sends = {r: pairwise_peers(r, n, step)[0] for r in range(n)}
        assert sorted(sends.values()) == list(range(n)), "each rank is sent to once per step"
        for r in range(n):
            assert pairwise_peers(sends[r], n, step)[1] == r, "the receiver expects this sender"
    for r in range(n):
        assert sorted(pairwise_peers(r, n, k)[0] for k in range(1, n)) == sorted(set(range(n)) - {r})


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_scattered_receives_in_the_order_peers_send(n):
    for r in range(n):
        for k, src in enumerate(recv_order(r, n)):
            assert send_order(src, n)[k] == r  # src's k-th block is the one for r


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 13, 16])
def test_bruck_moves_every_block_by_its_index(n):
    """Replay the schedule on labels (origin, destination): every block ends where it belongs, in
    log2 N steps, each rank sending the same number of blocks per step."""
    work = [[(r, int(d)) for d in rotation(r, n)] for r in range(n)]  # work[r][i]: (origin, destination)
    assert bruck_steps(n) == (n - 1).bit_length()
    for step in range(bruck_steps(n)):
        idx = bruck_blocks(n, step)
        moved = [[work[r][i] for i in idx] for r in range(n)]
        for r in range(n):
            dst, src = bruck_peers(r, n, step)
            assert bruck_peers(dst, n, step)[1] == r
            for i, label in zip(idx, moved[src], strict=True):
                work[r][i] = label
    for r in range(n):
        got = [work[r][i] for i in unrotation(r, n)]
        assert got == [(s, r) for s in range(n)], "block s on rank r is the one rank s sent to r"


@pytest.mark.parametrize("block", [4, 4096])  # rows below and above bruck.ROW_COPY_FROM_BYTES
def test_a_data_free_bruck_packs_with_the_calls_a_real_one_makes(monkeypatch, block):
    """A simulated host times the algorithm's own Python: on phantoms the packing makes the same
    numpy calls (on one element a row), timed, and charges the bytes a real one moves."""
    calls, charged = [], []
    for name in ("take", "copyto"):
        real = getattr(np, name)
        monkeypatch.setattr(
            bruck.np, name, lambda *a, _f=real, _n=name, **k: (calls.append(_n), _f(*a, **k))[1]
        )
    monkeypatch.setattr(chunks, "local_copy", lambda nbytes, call_s: charged.append((nbytes, call_s)))
    n, idx = 8, np.array(bruck_blocks(8, 1))

    def pack(make):
        calls.clear(), charged.clear()
        work, out = make(n * block).reshape(n, block), make(len(idx) * block)
        bruck._take(work, idx, out.reshape(len(idx), block))
        bruck._scatter(out, work, idx)
        return list(calls), list(charged)

    real_calls, real_charged = pack(lambda k: np.zeros(k, np.float32))
    phantom_calls, phantom_charged = pack(lambda k: chunks.phantom(k, "float32"))
    assert phantom_calls == real_calls == (["take"] if block == 4 else ["copyto"] * len(idx))
    assert real_charged == [] and [nbytes for nbytes, _ in phantom_charged] == [len(idx) * block * 4] * 2
    assert all(0 <= call_s < 0.1 for _, call_s in phantom_charged)  # each call's own time, as timed


def test_uneven_counts_add_up_and_have_zeros():
    for n in (1, 2, 3, 4, 7):
        for count in (0, 1, 5, 100):
            rows = uneven_counts(n, count)
            assert all(sum(row) == count and min(row) >= 0 for row in rows)
            check_counts(rows, n, [count])
    assert 0 in uneven_counts(4, 100)[0] and 0 in [r[1] for r in uneven_counts(4, 100)]
    assert packed_bounds([2, 0, 3]) == ((0, 2), (2, 2), (2, 5))
    with pytest.raises(UsageError, match="^counts: 1 rows, one per rank needs 2"):
        check_counts([[1, 3]], 2, [4])
    with pytest.raises(UsageError, match=r"^counts: row 1 must be 2 counts >= 0, got \[5, -1\]"):
        check_counts([[1, 3], [5, -1]], 2, [4])


def _grid(n, collective, algorithm, inplace=False, dtype="float64", segment_bytes=24):
    counts = (
        (0, n, 3 * n, 41 * n, 600 * n) if collective == "alltoall" else (0, 1, 3 * n + 1, 101)
    )  # 600: rows of 4.8 KB

    def body(comm):
        wrong = 0
        for count in counts:
            x = pattern(comm.rank, count, dtype)
            out = run_collective(comm, collective, x, "sum", algorithm, segment_bytes, inplace)
            wrong += count_wrong(out, expected_output(collective, comm.rank, n, count, dtype, ReduceOp.SUM))
            if inplace:
                assert out is x
        return wrong

    return run_local(n, body, timeout_s=20)


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS["alltoall"])
def test_alltoall_equals_the_closed_form(algorithm, n):
    assert _grid(n, "alltoall", algorithm) == [0] * n
    assert _grid(n, "alltoall", algorithm, inplace=True) == [0] * n


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS["alltoallv"])
def test_alltoallv_uneven_counts_with_zeros_equal_the_closed_form(algorithm, n):
    assert _grid(n, "alltoallv", algorithm) == [0] * n


@pytest.mark.parametrize("algorithm", ALGORITHMS["alltoallv"])
def test_alltoallv_learns_what_it_receives_and_keeps_shape_free_blocks(algorithm):
    """Without recv_counts the counts go round first; rank r sends rank d (r + d) % 3 elements of
    value 100 r + d, so the receiver knows who sent what."""
    n = 5

    def body(comm):
        send = [(comm.rank + d) % 3 for d in range(n)]
        x = np.concatenate([np.full(c, 100 * comm.rank + d, np.int32) for d, c in enumerate(send)])
        return alltoallv(comm, x, send, algorithm=algorithm)

    for r, got in enumerate(run_local(n, body, timeout_s=20)):
        want = np.concatenate([np.full((s + r) % 3, 100 * s + r, np.int32) for s in range(n)])
        assert got.dtype == np.int32 and np.array_equal(got, want)


def test_alltoall_in_a_process_group():
    """Two groups of 3 (even and odd ranks) exchange within themselves: what an expert-parallel
    group of a grid does."""

    def body(comm):
        group = split(comm, comm.rank % 2, name="experts")
        x = np.arange(3 * 4, dtype=np.float32) + 1000 * comm.rank
        a = alltoall(group, x, "pairwise")
        v = alltoallv(group, np.arange(group.rank + 1, dtype=np.float32), [group.rank + 1, 0, 0])
        return a, v  # v: group rank 0 gets 1, 2 and 3 elements from group ranks 0, 1, 2; the others none

    results = run_local(6, body, timeout_s=20)
    for rank, (a, v) in enumerate(results):
        members = [m for m in range(6) if m % 2 == rank % 2]
        me = members.index(rank)
        want = np.concatenate([np.arange(me * 4, me * 4 + 4, dtype=np.float32) + 1000 * m for m in members])
        assert np.array_equal(a, want)
        gathered = [np.arange(k + 1, dtype=np.float32) for k in range(3)] if me == 0 else []
        assert np.array_equal(v, np.concatenate([np.zeros(0, np.float32), *gathered]))


def test_bad_counts_name_the_key_before_anything_is_sent():
    def add_up(comm):
        return alltoallv(comm, np.zeros(5), [2, 2])

    with pytest.raises(
        UsageError, match="^send_counts: alltoallv: send_counts add up to 4 elements, but x has 5"
    ):
        run_local(2, add_up)
    with pytest.raises(UsageError, match="^send_counts: .*has 3 entries, one per rank needs 2"):
        run_local(2, lambda comm: alltoallv(comm, np.zeros(3), [1, 1, 1]))
    with pytest.raises(UsageError, match="^recv_counts: .*whole numbers >= 0"):
        run_local(2, lambda comm: alltoallv(comm, np.zeros(2), [1, 1], [1, -1]))
    with pytest.raises(UsageError, match="^x: alltoall: 5 elements do not cut into 2 equal blocks"):
        run_local(2, lambda comm: alltoall(comm, np.zeros(5)))
    with pytest.raises(UsageError, match="allowed: pairwise, bruck, scattered"):
        run_local(1, lambda comm: alltoall(comm, np.zeros(2), "ring"))
    with pytest.raises(UsageError, match="^recv_counts: .*own block: 1 elements received, 2 sent"):
        run_local(2, lambda comm: alltoallv(comm, np.zeros(3), [2, 1][:: 1 - 2 * comm.rank], [1, 1]))


def test_counts_two_ranks_disagree_on_are_a_mismatch_naming_both():
    def body(comm):  # rank 0 sends rank 1 three elements; rank 1 expects two
        if comm.rank == 0:
            return alltoallv(comm, np.zeros(4), [1, 3], [1, 2])
        return alltoallv(comm, np.zeros(3), [2, 1], [2, 1])

    with pytest.raises(
        MessageMismatch, match="rank 1: alltoall.scattered: expected 2 elements from rank 0, got 3"
    ):
        run_local(2, body)
