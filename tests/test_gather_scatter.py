"""Gather, scatter and the send/recv ring: their trees as pure functions, then every algorithm on
in-process ranks against the closed form, out of place and in place, at every root."""

import numpy as np
import pytest

from playground.collectives import ALGORITHMS, gather, run_collective, scatter, sendrecv
from playground.collectives.check import count_wrong, expected_output, make_input, pattern
from playground.collectives.gather import span_of, subtree_blocks
from playground.collectives.ops import ReduceOp
from playground.collectives.sendrecv import ring_peers
from playground.comm.world import run_local

WORLD_SIZES = [1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 13])
def test_subtrees_cover_every_vrank_once(n):
    def covered(v):  # the vranks v's subtree holds, from its children's spans
        out = [v]
        for child, blocks in subtree_blocks(v, n):
            assert blocks == span_of(child, n), "a child's span is its own subtree's"
            assert covered(child) == list(range(child, child + blocks)), "a subtree is contiguous"
            out += covered(child)
        return out

    assert covered(0) == list(range(n))


def test_ring_peers_shift():
    assert ring_peers(0, 4) == (1, 3)
    assert ring_peers(3, 4, shift=2) == (1, 1)
    assert ring_peers(0, 1) == (0, 0)


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize(
    "collective,algorithm",
    [(c, a) for c in ("gather", "scatter", "sendrecv") for a in ALGORITHMS[c]],
)
def test_equals_the_closed_form_out_of_place_and_in_place(collective, algorithm, n):
    def body(comm):
        wrong = 0
        for inplace in (False, True):
            for per_rank in (0, 1, 5, 37):
                count = per_rank * n if collective == "scatter" else per_rank
                x = make_input(collective, comm.rank, n, count, "int32", inplace)
                out = run_collective(comm, collective, x, "sum", algorithm, 12, inplace)
                want = expected_output(collective, comm.rank, n, count, "int32", ReduceOp.SUM)
                wrong += count_wrong(out, want)
        return wrong

    assert run_local(n, body, timeout_s=20) == [0] * n


@pytest.mark.parametrize("algorithm", ALGORITHMS["gather"])
def test_every_root(algorithm):
    n = 5

    def body(comm):
        results = []
        for root in range(n):
            x = np.full(3, 10 * comm.rank + root, np.float32)
            results.append(gather(comm, x, root, algorithm, segment_bytes=8))
            part = scatter(comm, np.arange(3 * n, dtype=np.float32) + 100 * root, root, algorithm, 8)
            results.append(part)
        return results

    for rank, results in enumerate(run_local(n, body, timeout_s=20)):
        for root in range(n):
            gathered, part = results[2 * root], results[2 * root + 1]
            want = np.repeat(np.arange(n, dtype=np.float32) * 10 + root, 3)
            assert (gathered is None) if rank != root else np.array_equal(gathered, want)
            assert np.array_equal(part, np.arange(3 * rank, 3 * rank + 3, dtype=np.float32) + 100 * root)


def test_sendrecv_shift_and_in_place():
    def body(comm):
        x = np.full((2, 3), comm.rank, np.int64)
        shifted = sendrecv(comm, x, shift=2)
        sendrecv(comm, x, inplace=True)
        return shifted, x

    for rank, (shifted, x) in enumerate(run_local(5, body, timeout_s=20)):
        assert shifted.shape == (2, 3) and (shifted == (rank - 2) % 5).all()
        assert (x == (rank - 1) % 5).all()


def test_in_place_gather_keeps_its_block_and_fills_the_root():
    def body(comm):
        x = make_input("gather", comm.rank, 3, 4, "float64", inplace=True)
        out = gather(comm, x, root=1, inplace=True)
        return out, x

    for rank, (out, x) in enumerate(run_local(3, body, timeout_s=20)):
        assert np.array_equal(x[4 * rank : 4 * rank + 4], pattern(rank, 4, "float64"))
        if rank == 1:
            assert out is x and np.array_equal(
                x, np.concatenate([pattern(r, 4, "float64") for r in range(3)])
            )
        else:
            assert out is None
