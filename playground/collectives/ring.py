"""Ring all-reduce: reduce-scatter, then all-gather, around a ring of N ranks.

Words: the buffer is cut into N *chunks* (one per rank, near-equal, some empty when the count
is smaller than N); each chunk is cut into *segments* of at most `segment_bytes`, the unit that
is sent as one message. In each of the N-1 reduce-scatter *steps* a rank sends one chunk to its
right neighbour and receives another from its left neighbour, reducing it into its buffer; after
them rank r holds the fully reduced chunk r. The N-1 all-gather steps pass the reduced chunks
around the same way, copying instead of reducing.

All segments of a step are posted at once; while the rank reduces segment k, ZeroMQ's I/O thread
is already receiving segment k+1 and sending the outgoing chunk, so send, receive and reduction
overlap (as Gloo's ring_chunked does).

In the reduce-scatter a rank forwards every chunk it reduces (except the last, its own), so the
reduction is written straight into the message for the right neighbour (`isend_computed`: on the
shared-memory path, into the ring slot the neighbour reads) and sent segment by segment as soon as
it is ready, as NCCL's ring does, instead of into a buffer and then copied out at the next step.

Cost (alpha-beta): 2(N-1) steps, each moving S/N bytes: T = 2(N-1)(alpha + S/(N beta)), plus
(N-1)/N S/gamma for the reductions (reduction rate gamma: each reduce-scatter step reduces its chunk
before forwarding it; derived in playground/models/costs.py); every rank sends and receives
2(N-1)/N x S bytes, which is why busbw = algbw x 2(N-1)/N.
Results are bit-identical on all ranks: each chunk is reduced in one fixed order, then copied.
"""

from collections import deque
from collections.abc import Sequence

import numpy as np

from playground.collectives.chunks import (
    DEFAULT_SEGMENT_BYTES,
    ChunkBounds,
    copy,
    empty,
    flat,
    is_phantom,
    segment_bounds,
    segment_elems_for,
    work_buffer,
)
from playground.collectives.ops import ReduceOp
from playground.collectives.transfer import count_mismatch, exchange
from playground.core.errors import MessageMismatch
from playground.tracing.trace import CAT_PHASE

TAG_RING = -10


def reduce_scatter_step(rank: int, size: int, step: int) -> tuple[int, int]:
    """(send_chunk, recv_chunk) at `step` of 0..size-2; afterwards rank r owns the reduced chunk r.
    One step at a time, not a list: N ranks holding N steps each is N^2 at 1024 simulated ranks."""
    return (rank - step - 1) % size, (rank - step - 2) % size


def allgather_step(rank: int, size: int, step: int) -> tuple[int, int]:
    """(send_chunk, recv_chunk) at `step` of 0..size-2, starting from owning chunk `rank`."""
    return (rank - step) % size, (rank - step - 1) % size


def allgather_pass(
    comm, buf: np.ndarray, bounds: Sequence[tuple[int, int]], segment_elems: int, tag: int
) -> None:
    """The ring all-gather on flat `buf`, starting from owning chunk `rank`: N-1 steps of passing
    the chunk received last to the right neighbour."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    with comm.tracer.span("ring.all_gather", CAT_PHASE, steps=comm.size - 1):
        for step in range(comm.size - 1):
            send_chunk, recv_chunk = allgather_step(comm.rank, comm.size, step)
            exchange(
                comm,
                buf,
                bounds[send_chunk],
                right,
                bounds[recv_chunk],
                left,
                segment_elems,
                None,
                tag,
                "ring.all_gather",
                step,
            )


def reduce_scatter_into(
    comm,
    buf: np.ndarray,
    source: np.ndarray,
    bounds: Sequence[tuple[int, int]],
    segment_elems: int,
    op: ReduceOp,
    tag: int,
) -> None:
    """Ring reduce-scatter of flat `source` over all ranks; rank r's reduced chunk r lands in `buf`.

    Only chunk r of `buf` is written: every other reduced chunk goes straight to the right
    neighbour as it is computed.
    """
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    last = comm.size - 2
    ufunc = op.ufunc

    def mismatch(got: int, want: int, step: int) -> MessageMismatch:
        return count_mismatch(
            comm, left, tag, f"ring.reduce_scatter step {step}", got, want, "ring.reduce_scatter"
        )

    def fill(out):  # called by isend_computed before it returns: a, b and step are this segment's
        got = comm.recv_reduce(left, tag, out, ufunc, base=source[a:b])
        if got != b - a:
            raise mismatch(got, b - a, step)

    dtype = buf.dtype
    with comm.tracer.span("ring.reduce_scatter", CAT_PHASE, steps=last + 1):
        first = bounds[reduce_scatter_step(comm.rank, comm.size, 0)[0]]
        sends = deque(comm.isend(source[a:b], right, tag) for a, b in segment_bounds(*first, segment_elems))
        for step in range(last + 1):
            while sends and sends[0].test():  # completed: let go (N steps of N ranks add up)
                sends.popleft()
            recv_chunk = reduce_scatter_step(comm.rank, comm.size, step)[1]
            for a, b in segment_bounds(*bounds[recv_chunk], segment_elems):
                if step < last:  # this chunk is what we send at the next step: reduce into the message
                    sends.append(comm.isend_computed(right, tag, b - a, dtype, fill))
                else:
                    got = comm.recv_reduce(left, tag, buf[a:b], ufunc, base=source[a:b])
                    if got != b - a:
                        raise mismatch(got, b - a, step)
        for req in sends:
            req.wait()


def allreduce_ring(
    comm,
    x: np.ndarray,
    op: ReduceOp = ReduceOp.SUM,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inplace: bool = False,
) -> np.ndarray:
    """All ranks end with op-reduction of every rank's `x`, bit-identical, equal to numpy's (in `x`
    itself with `inplace`: safe because the reduce-scatter writes only this rank's own chunk, which
    it never sent, and every send has completed before the all-gather overwrites the rest)."""
    if comm.size == 1 or x.size == 0:
        return work_buffer(x, inplace).reshape(x.shape)
    source = work_buffer(x, True) if inplace else flat(x)
    buf = source if inplace else empty(source.size, like=source)  # every chunk gets written
    bounds = ChunkBounds(buf.size, comm.size)
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    reduce_scatter_into(comm, buf, source, bounds, seg, op, TAG_RING)
    allgather_pass(comm, buf, bounds, seg, TAG_RING)
    return buf.reshape(x.shape)


def reduce_scatter_ring(
    comm,
    x: np.ndarray,
    op: ReduceOp = ReduceOp.SUM,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inplace: bool = False,
) -> np.ndarray:
    """Rank r gets chunk r (of `ChunkBounds(x.size, N)`) of the reduction of every rank's flat `x`:
    a new array, or with `inplace` chunk r of `x` itself (writable, C-contiguous), returned as a
    view, the other chunks left as they were (ZeRO's gradient shard, reduced where it lies)."""
    source = work_buffer(x, True) if inplace else flat(x)
    bounds = ChunkBounds(source.size, comm.size)
    a, b = bounds[comm.rank]
    if comm.size == 1 or source.size == 0:
        return source[a:b] if inplace else copy(source[a:b])
    buf = source if inplace else empty(source.size, like=source)  # safe in place: see allreduce_ring
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    reduce_scatter_into(comm, buf, source, bounds, seg, op, TAG_RING)
    return buf[a:b] if inplace else copy(buf[a:b])


def allgather_ring(
    comm, x: np.ndarray, segment_bytes: int = DEFAULT_SEGMENT_BYTES, inplace: bool = False
) -> np.ndarray:
    """Concatenation of every rank's flat `x` (all the same length), in rank order, on every rank.

    With `inplace`, `x` (writable, C-contiguous) is the whole output, cut into chunks as
    `reduce_scatter_ring` cuts its input (`ChunkBounds(x.size, N)`, so they may differ by one
    element), and this rank's chunk is already in place: the others are filled in and `x` is
    returned (ZeRO's updated parameter shards, gathered where they belong)."""
    if inplace:
        buf = work_buffer(x, True)
        bounds: Sequence[tuple[int, int]] = ChunkBounds(buf.size, comm.size)
    else:
        part = flat(x)
        n = part.size
        buf = empty(n * comm.size, like=part)
        if not is_phantom(buf):
            buf[comm.rank * n : (comm.rank + 1) * n] = part
        bounds = [(i * n, (i + 1) * n) for i in range(comm.size)]
    if comm.size > 1 and buf.size:
        seg = segment_elems_for(segment_bytes, buf.itemsize)
        allgather_pass(comm, buf, bounds, seg, TAG_RING)
    return x if inplace else buf
