"""Scattered all-to-all: every block posted at once (non-blocking sends), then received as it comes.

Words as in pairwise.py (*blocks*, one per destination). Rank r posts its N-1 sends in the order
r+1, r+2, ..., r+N-1 (mod N), so that at any moment the ranks aim at different receivers, copies
its own block while they travel (over shm, while the peers read them from its memory: lent,
comm/shm_lend.py), then takes the blocks from r-1, r-2, ... in the order they were sent to it; a
block that arrives before its turn waits parked in the communicator. No step waits for a partner:
a slow rank delays only the blocks it sends and receives, not everyone's next step. MPICH uses this
for medium sizes (MPIR_Alltoall_intra_scattered, isend/irecv in batches of
MPIR_CVAR_ALLTOALL_THROTTLE = 32); its cost on a real machine is the messages in flight at once,
which share the CPU, the memory and, over shared memory, the rings (a full ring makes the sender
wait while it takes in what arrives).

Cost (alpha-beta, full-duplex ports): the N-1 blocks of S/N leave each port back to back and the
last one arrives alpha later: T = alpha + (N-1) S/(N beta) when every receiver's in-port is free as
its sender reaches it (they are: at the k-th send every rank aims at rank + k). It has the pairwise
exchange's bytes with a single alpha; on a host, each message's CPU does not overlap (the simulator
on a calibrated host has it), which is what lets Bruck's log2 N messages win for small blocks.
"""

from collections.abc import Sequence

import numpy as np

from playground.collectives.chunks import ChunkBounds, copy_into, segment_bounds
from playground.collectives.transfer import count_mismatch
from playground.tracing.trace import CAT_PHASE

TAG_SCATTERED = -62


def send_order(rank: int, size: int) -> list[int]:
    """The ranks `rank` sends to, in order: rank+1, ..., rank+N-1 (mod N)."""
    return [(rank + k) % size for k in range(1, size)]


def recv_order(rank: int, size: int) -> list[int]:
    """The ranks `rank` receives from, in the order they send to it: rank-1, ..., rank-N+1."""
    return [(rank - k) % size for k in range(1, size)]


def scattered_into(
    comm,
    source: np.ndarray,
    send_bounds: Sequence[tuple[int, int]],
    out: np.ndarray,
    recv_bounds: Sequence[tuple[int, int]],
    segment_elems: int,
    tag: int = TAG_SCATTERED,
) -> None:
    """Block d of flat `source` to rank d, every send posted before any receive, and rank s's block
    for us into `out[recv_bounds[s]]`; every block arrives whole, zero-length ones too."""
    rank, size = comm.rank, comm.size
    with comm.tracer.span("alltoall.scattered", CAT_PHASE, messages=size - 1):
        sends = [
            comm.isend_lent(source[a:b], dst, tag)  # `source` is left alone until they complete
            for dst in send_order(rank, size)
            for a, b in segment_bounds(*send_bounds[dst], segment_elems)
        ]
        a, b = send_bounds[rank]  # the own block, copied while the peers read theirs
        copy_into(out[slice(*recv_bounds[rank])], source[a:b])
        for src in recv_order(rank, size):
            for a, b in segment_bounds(*recv_bounds[src], segment_elems):
                got = comm.recv_reduce(src, tag, out[a:b], None)
                if got != b - a:
                    raise count_mismatch(comm, src, tag, "alltoall.scattered", got, b - a)
        for req in sends:
            req.wait()


def alltoall_scattered(comm, source: np.ndarray, out: np.ndarray, block: int, segment_elems: int) -> None:
    """Rank r's `out` = block r of every rank's flat `source` (N blocks of `block` elements)."""
    bounds = ChunkBounds(block * comm.size, comm.size)
    scattered_into(comm, source, bounds, out, bounds, segment_elems)
