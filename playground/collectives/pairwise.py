"""Pairwise-exchange all-to-all: N-1 steps, one partner to send to and one to receive from in each.

Words: every rank's input is cut into N *blocks*, block d for rank d (equal for `alltoall`, of
any lengths, zero included, for `alltoallv`); rank r's output is block r of every rank's input,
in rank order. A rank's own block is copied locally. At *step* k = 1..N-1 rank r sends its block
for r+k to rank r+k and receives rank r-k's block for it (mod N): every step is a permutation of the
ranks, so each port carries one message at a time, and a block leaves its sender exactly once, in
pieces of at most `segment_bytes`, lent (over shm the receiver reads it from the sender's memory:
one copy, as MPICH's single-copy path). MPICH uses this for long messages (MPIR_Alltoall_intra_pairwise;
at a power of two it pairs r with r XOR k instead, which this shift matches on uniform links).

Cost (alpha-beta, S each rank's input, N ranks): N-1 steps of one block each, and a step waits for
its receive: T = (N-1)(alpha + S/(N beta)). The bytes are the minimum ((N-1)/N S each way, which is
why busbw = algbw x (N-1)/N); the N-1 alphas are the most of the three algorithms (Bruck's
ceil(log2 N), the scattered form's one overlapped alpha), so it wins only where bytes dominate and
messages in flight contend (playground/models/costs.py).
"""

from collections.abc import Sequence

import numpy as np

from playground.collectives.chunks import ChunkBounds, copy_into
from playground.collectives.transfer import exchange
from playground.tracing.trace import CAT_PHASE

TAG_PAIRWISE = -60


def pairwise_peers(rank: int, size: int, step: int) -> tuple[int, int]:
    """(send_to, recv_from) at `step` of 1..size-1: rank + step and rank - step, mod size."""
    return (rank + step) % size, (rank - step) % size


def pairwise_into(
    comm,
    source: np.ndarray,
    send_bounds: Sequence[tuple[int, int]],
    out: np.ndarray,
    recv_bounds: Sequence[tuple[int, int]],
    segment_elems: int,
    tag: int = TAG_PAIRWISE,
) -> None:
    """Block d of flat `source` (`send_bounds[d]`) to rank d, and rank s's block for us into
    `out[recv_bounds[s]]`, one partner at a time; every block arrives whole, zero-length ones too."""
    rank, size = comm.rank, comm.size
    a, b = send_bounds[rank]
    copy_into(out[slice(*recv_bounds[rank])], source[a:b])
    with comm.tracer.span("alltoall.pairwise", CAT_PHASE, steps=size - 1):
        for step in range(1, size):
            send_to, recv_from = pairwise_peers(rank, size, step)
            exchange(
                comm,
                out,
                send_bounds[send_to],
                send_to,
                recv_bounds[recv_from],
                recv_from,
                segment_elems,
                None,
                tag,
                "alltoall.pairwise",
                step,
                source=source,
                lend=True,
            )


def alltoall_pairwise(comm, source: np.ndarray, out: np.ndarray, block: int, segment_elems: int) -> None:
    """Rank r's `out` = block r of every rank's flat `source` (N blocks of `block` elements)."""
    bounds = ChunkBounds(block * comm.size, comm.size)
    pairwise_into(comm, source, bounds, out, bounds, segment_elems)
