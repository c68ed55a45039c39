"""Binomial-tree reduce and broadcast, and all-reduce as reduce-to-root then broadcast.

Ranks are renumbered relative to the root (vrank = (rank - root) mod N). In the reduce, at round
k (mask = 2^k) a rank whose bit k is set sends its partial result to vrank - mask and is done;
the others receive from vrank + mask (if it exists) and reduce. After ceil(log2 N) rounds the root
holds the result. The broadcast runs the same tree backwards. Any N works, not only powers of two.

Large buffers are cut into segments so a parent reduces segment k while segment k+1 arrives.
Cost (alpha-beta): 2 ceil(log2 N) (alpha + S/beta), plus ceil(log2 N) S/gamma for the reduce's
reductions (playground/models/costs.py): few steps (good for small S), but every step moves the
whole buffer (poor for large S, where the ring wins). Results are bit-identical on all
ranks: the root's reduction is broadcast.
"""

import numpy as np

from playground.collectives.chunks import (
    DEFAULT_SEGMENT_BYTES,
    segment_bounds,
    segment_elems_for,
    work_buffer,
)
from playground.collectives.ops import ReduceOp
from playground.collectives.transfer import exchange
from playground.tracing.trace import CAT_PHASE

TAG_TREE_REDUCE = -20
TAG_TREE_BCAST = -21


def reduce_schedule(vrank: int, size: int) -> tuple[list[int], int | None]:
    """(children to receive from in order, parent to send to or None), in relative ranks."""
    children: list[int] = []
    mask = 1
    while mask < size:
        if vrank & mask:
            return children, vrank - mask
        if vrank + mask < size:
            children.append(vrank + mask)
        mask <<= 1
    return children, None


def bcast_schedule(vrank: int, size: int) -> tuple[int | None, list[int]]:
    """(parent to receive from or None, children to send to in order), in relative ranks."""
    children, parent = reduce_schedule(vrank, size)
    return parent, list(reversed(children))


def reduce_tree_into(comm, buf: np.ndarray, op: ReduceOp, root: int, segment_bytes: int) -> None:
    """Reduce flat `buf` over all ranks onto `root`, in place (other ranks' buffers are scratch)."""
    size = comm.size
    vrank = (comm.rank - root) % size
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    children, parent = reduce_schedule(vrank, size)
    whole = (0, buf.size)
    with comm.tracer.span("tree.reduce", CAT_PHASE, children=len(children)):
        for child in children:
            src = (child + root) % size
            exchange(comm, buf, None, None, whole, src, seg, op, TAG_TREE_REDUCE, "tree.reduce")
        if parent is not None:
            dst = (parent + root) % size
            exchange(comm, buf, whole, dst, None, None, seg, None, TAG_TREE_REDUCE, "tree.reduce")


def broadcast_tree_into(comm, buf: np.ndarray, root: int, segment_bytes: int) -> None:
    """Copy `root`'s flat `buf` into every rank's `buf`, in place."""
    size = comm.size
    vrank = (comm.rank - root) % size
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    parent, children = bcast_schedule(vrank, size)
    whole = (0, buf.size)
    with comm.tracer.span("tree.broadcast", CAT_PHASE, children=len(children)):
        if parent is not None:
            src = (parent + root) % size
            exchange(comm, buf, None, None, whole, src, seg, None, TAG_TREE_BCAST, "tree.broadcast")
        sends = [
            comm.isend(buf[a:b], (child + root) % size, TAG_TREE_BCAST)
            for child in children
            for a, b in segment_bounds(0, buf.size, seg)
        ]
        for req in sends:
            req.wait()


def allreduce_tree(
    comm,
    x: np.ndarray,
    op: ReduceOp = ReduceOp.SUM,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inplace: bool = False,
) -> np.ndarray:
    """All ranks end with op-reduction of every rank's `x`, bit-identical, equal to numpy's (in `x`
    itself with `inplace`)."""
    buf = work_buffer(x, inplace)
    if comm.size == 1 or buf.size == 0:
        return buf.reshape(x.shape)
    reduce_tree_into(comm, buf, op, 0, segment_bytes)
    broadcast_tree_into(comm, buf, 0, segment_bytes)
    return buf.reshape(x.shape)
