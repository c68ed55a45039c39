"""Halving-doubling forwards its first step's reductions straight into the second step's messages
when the cut falls on a segment boundary (playground/collectives/halving_doubling.py): the results
stay exact on every transport, and the path is really taken."""

import numpy as np
import pytest

from playground.collectives import ReduceOp, run_collective
from playground.collectives.check import expected_result, pattern
from playground.collectives.chunks import ChunkBounds
from playground.collectives.halving_doubling import forwardable, forwarding_order, halving_steps
from playground.comm.world import run_local

pytestmark = pytest.mark.timeout(60)


def test_the_first_steps_cut_on_a_segment_boundary_is_forwarded():
    blocks = ChunkBounds(8 * 64, 8)  # 64 elements a block, segments of 16
    span = lambda r: (blocks[r[0]][0], blocks[r[1] - 1][1])  # noqa: E731
    for rank in range(8):
        steps = halving_steps(rank, 8)
        ahead = forwardable(span(steps[0][2]), span(steps[1][1]), 16)
        assert len(ahead) == 8  # the second step's 128 elements, in 8 segments
    # a cut inside a segment: nothing is forwarded, the next step sends from the buffer
    assert forwardable((0, 40), (20, 40), 16) == frozenset()
    # forwarded segments first, then the rest, each ascending
    assert forwarding_order((0, 64), frozenset({(32, 48), (48, 64)}), 16) == [
        (32, 48),
        (48, 64),
        (0, 16),
        (16, 32),
    ]


@pytest.mark.parametrize("kind", ["local", "ipc", "shm"])
@pytest.mark.parametrize("n, count", [(8, 8 * 64), (4, 4 * 64 + 32), (6, 6 * 64)])
def test_forwarding_hd_is_exact(kind, n, count, tmp_path):
    def body(comm):
        x = pattern(comm.rank, count, "float32")
        return run_collective(comm, "allreduce", x, ReduceOp.SUM, "hd", 64)

    want = expected_result(n, count, "float32", ReduceOp.SUM)
    for out in run_local(n, body, timeout_s=30, transport=kind, directory=str(tmp_path)):
        np.testing.assert_array_equal(out, want)
