"""Recursive-doubling all-reduce: the latency-optimal choice for small messages.

With p the largest power of two <= N, ranks first fold as in halving-doubling (the first
2(N-p) ranks pair up, even ones hand their data to the odd ones and sit out). Then at distance
d = 1, 2, 4, ..., p/2 each participant swaps its *whole* buffer with new rank (own XOR d) and
reduces: after log2 p steps everyone holds the full reduction. Finally the folded ranks get the
result back. Both partners compute op(a, b) and op(b, a), which are bitwise equal for sum, prod,
max and min (IEEE addition and multiplication are commutative), so results stay bit-identical.

Cost (alpha-beta): log2(p) (alpha + S/beta + S/gamma) (+ 2 (alpha + S/beta) + S/gamma for the fold;
gamma is the reduction rate, playground/models/costs.py): the fewest
sequential steps of all our algorithms, but each moves the whole buffer, so it is for small S
only (MPICH makes the same choice for short messages).
"""

import numpy as np

from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, segment_elems_for, work_buffer
from playground.collectives.halving_doubling import old_rank, run_folded
from playground.collectives.ops import ReduceOp
from playground.collectives.transfer import exchange
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
    size, nbytes = comm.size, buf.nbytes
    if size == 1 or nbytes == 0:
        return buf.reshape(x.shape)
    if size & (size - 1) == 0 and nbytes <= segment_bytes:
        swap_whole(comm, buf, op)  # a power of two and one message a step: the small-message path
        return buf if buf is x or x.ndim == 1 else buf.reshape(x.shape)
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    whole = (0, buf.size)

    def core(new_rank: int, p: int) -> None:
        with comm.tracer.span("rd.exchange", CAT_PHASE, steps=p.bit_length() - 1):
            d = 1
            while d < p:
                peer = old_rank(new_rank ^ d, comm.size)
                # Send first and let the sends complete (small arrays are copied at once; zero-copy
                # ones leave with ZeroMQ's I/O thread, whatever the peer does), then reduce into the buffer.
                exchange(comm, buf, whole, peer, None, None, seg, None, TAG_RD, "rd.step")
                exchange(comm, buf, None, None, whole, peer, seg, op, TAG_RD, "rd.step")
                d *= 2

    if comm.size & (comm.size - 1):
        run_folded(comm, buf, op, seg, TAG_RD, "rd", core)
    else:
        core(comm.rank, comm.size)
    return buf.reshape(x.shape)


def swap_whole(comm, buf: np.ndarray, op: ReduceOp) -> None:
    """The core's steps when N is a power of two and `buf` is one message (what exchange() does,
    without its segment bookkeeping: this is most of an 8-byte all-reduce's Python). Its phase is
    the whole collective: drawn when messages are traced (a run: inspect, the diagram), left out
    when only phases are (bench, whose op event spans the same time; the span cost 0.3-0.5 us of a
    5 us all-reduce)."""
    if comm.tracer.messages:
        with comm.tracer.span("rd.exchange", CAT_PHASE, steps=comm.size.bit_length() - 1):
            _swap_steps(comm, buf, op.ufunc)
    else:
        _swap_steps(comm, buf, op.ufunc)


def _swap_steps(comm, buf: np.ndarray, ufunc) -> None:
    size, rank, count = comm.size, comm.rank, buf.size
    d = 1
    while d < size:
        peer = rank ^ d
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
