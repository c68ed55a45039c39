"""Recursive-doubling all-reduce: the latency-optimal choice for small messages.

With p the largest power of two <= N, ranks first fold as in halving-doubling (the first
2(N-p) ranks pair up, even ones hand their data to the odd ones and sit out). Then at distance
d = 1, 2, 4, ..., p/2 each participant swaps its *whole* buffer with new rank (own XOR d) and
reduces: after log2 p steps everyone holds the full reduction. Finally the folded ranks get the
result back. Both partners compute op(a, b) and op(b, a), which are bitwise equal for sum, prod,
max and min (IEEE addition and multiplication are commutative), so results stay bit-identical.

Each step is one `comm.sendrecv_reduce` of the whole buffer, at every size: the swap and its
reduction are the communicator's, so every transport (the simulator's included) runs this one
definition, and the shared-memory transport does each step in C, streaming a large buffer through
a small window and reducing the partner's cells as they come (comm/shm_stream.py), which at two
ranks is the whole all-reduce in one pass over the buffer.

Cost (alpha-beta): log2(p) (alpha + S/beta + S/gamma) (+ 2 (alpha + S/beta) + S/gamma for the fold;
gamma is the reduction rate, playground/models/costs.py): the fewest sequential steps of all our
algorithms, but each moves the whole buffer, so where bytes cost more than steps it is for small S
(MPICH makes the same choice for short messages over a network).
"""

import numpy as np

from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, segment_elems_for, work_buffer
from playground.collectives.halving_doubling import old_rank, run_folded
from playground.collectives.ops import ReduceOp
from playground.core.errors import MessageMismatch
from playground.tracing.trace import CAT_PHASE

TAG_RD = -40


def allreduce_recursive_doubling(
    comm,
    x: np.ndarray,
    op: ReduceOp = ReduceOp.SUM,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inplace: bool = False,
) -> np.ndarray:
    """All ranks end with op-reduction of every rank's `x`, bit-identical, equal to numpy's (in `x`
    itself with `inplace`)."""
    buf = work_buffer(x, inplace)
    size = comm.size
    if size == 1 or buf.nbytes == 0:
        return buf.reshape(x.shape)
    if size & (size - 1) == 0:  # a power of two: no fold, every rank swaps at every step
        if comm.tracer.messages:
            swap_whole(comm, buf, op)
        else:  # (swap_whole's untraced case, one call less: this is an 8-byte all-reduce's path)
            _swap_steps(comm, buf, op.ufunc, comm.rank, size)
        return buf if buf is x or buf.ndim == x.ndim else buf.reshape(x.shape)
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    run_folded(comm, buf, op, seg, TAG_RD, "rd", lambda new_rank, p: swap_whole(comm, buf, op, new_rank, p))
    return buf.reshape(x.shape)


def swap_whole(
    comm, buf: np.ndarray, op: ReduceOp, new_rank: int | None = None, p: int | None = None
) -> None:
    """The core's log2 p steps among new ranks 0..p-1 (`new_rank` None: every rank takes part, as
    itself): each swaps its whole buffer with its partner and reduces, one `sendrecv_reduce` a
    step (the communicator's swap with a reduction, which each transport does its own way: over
    shared memory, untraced, in C, a large buffer streaming through a small window). Its phase is
    the whole collective when N is a power of two: drawn when messages are traced (a run: inspect,
    the diagram), left out when only phases are (bench, whose op event spans the same time; the
    span cost 0.3-0.5 us of a 5 us all-reduce)."""
    if new_rank is None and not comm.tracer.messages:
        _swap_steps(comm, buf, op.ufunc, comm.rank, comm.size)
        return
    p = p or comm.size
    with comm.tracer.span("rd.exchange", CAT_PHASE, steps=p.bit_length() - 1):
        _swap_steps(comm, buf, op.ufunc, comm.rank if new_rank is None else new_rank, p)


def _swap_steps(comm, buf: np.ndarray, ufunc, new_rank: int, p: int) -> None:
    size, rank, count = comm.size, comm.rank, buf.size
    d = 1
    while d < p:
        peer = new_rank ^ d if p == size else old_rank(new_rank ^ d, size)
        got = comm.sendrecv_reduce(buf, peer, peer, TAG_RD, ufunc)
        if got != count:
            raise MessageMismatch(
                f"rank {rank}: rd.step: expected {count} elements from rank {peer}, got {got} "
                "(do all ranks pass the same count and dtype?)",
                rank=rank,
                peer=peer,
                direction="from",
                tag=TAG_RD,
                op="rd.step",
            )
        d *= 2
