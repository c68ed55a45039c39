"""Send/recv around a ring: every rank sends its buffer to rank + 1 and receives rank - 1's (a shift).

nccl-tests' sendrecv: each rank one send and one receive of S bytes at once, every link of the ring
busy in both directions. It is the one step a ring algorithm repeats and what a pipeline stage does
with its activations. Cost (alpha-beta): T = alpha + S/beta, every rank's port sending and receiving
at once; busbw = algbw (factor 1). With `shift` s a rank sends to rank + s and receives from rank - s.
In place (MPI_Sendrecv_replace) the buffer cannot be overwritten while it is still leaving: the
message lands in a staging buffer and is copied over the input once the send has completed, as
MPICH's Sendrecv_replace packs its buffer aside first.
"""

import numpy as np

from playground.collectives.chunks import copy_into
from playground.collectives.transfer import exchange
from playground.tracing.trace import CAT_PHASE

TAG_SENDRECV = -80


def ring_peers(rank: int, size: int, shift: int = 1) -> tuple[int, int]:
    """(send_to, recv_from): rank + shift and rank - shift, mod N."""
    return (rank + shift) % size, (rank - shift) % size


def sendrecv_ring(comm, source: np.ndarray, out: np.ndarray, shift: int, segment_elems: int) -> None:
    """`out` (flat, as long as `source`) = rank - shift's `source`."""
    send_to, recv_from = ring_peers(comm.rank, comm.size, shift)
    if send_to == comm.rank:  # one rank, or a shift of a whole turn: its own buffer
        copy_into(out, source)
        return
    with comm.tracer.span("sendrecv.ring", CAT_PHASE):
        n = source.size
        exchange(
            comm,
            out,
            (0, n),
            send_to,
            (0, n),
            recv_from,
            segment_elems,
            None,
            TAG_SENDRECV,
            "sendrecv",
            source=source,
            lend=True,
        )
