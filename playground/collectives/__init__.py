"""Collective operations over a Communicator; one module per algorithm behind one dispatcher.

Every function is collective: all ranks call it in the same order with the same count and
dtype. Results are bit-identical on all ranks and equal numpy's reduction of the inputs.
"""

import numpy as np

from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, chunk_bounds
from playground.collectives.ops import ReduceOp
from playground.collectives.ring import allgather_ring, allreduce_ring, reduce_scatter_ring
from playground.collectives.tree import allreduce_tree, broadcast_tree_into, reduce_tree_into

ALLREDUCE_ALGORITHMS = {"ring": allreduce_ring, "tree": allreduce_tree}

__all__ = ["ReduceOp", "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "chunk_bounds",
           "ALLREDUCE_ALGORITHMS", "DEFAULT_SEGMENT_BYTES"]


def allreduce(comm, x: np.ndarray, op: ReduceOp | str = ReduceOp.SUM, algorithm: str = "ring",
              segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> np.ndarray:
    """op-reduction of every rank's `x`, as a new array on every rank (`x` is not modified)."""
    try:
        fn = ALLREDUCE_ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; allowed: {', '.join(ALLREDUCE_ALGORITHMS)}") from None
    return fn(comm, x, ReduceOp.parse(op), segment_bytes=segment_bytes)


def broadcast(comm, x: np.ndarray, root: int = 0, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> np.ndarray:
    """`root`'s `x` on every rank (every rank passes an array of the same shape and dtype)."""
    buf = np.array(x, copy=True, order="C").reshape(-1)
    if comm.size > 1 and buf.size:
        broadcast_tree_into(comm, buf, root, segment_bytes)
    return buf.reshape(np.shape(x))


def reduce(comm, x: np.ndarray, op: ReduceOp | str = ReduceOp.SUM, root: int = 0,
           segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> np.ndarray | None:
    """The reduction on `root`; None on the other ranks."""
    buf = np.array(x, copy=True, order="C").reshape(-1)
    if comm.size > 1 and buf.size:
        reduce_tree_into(comm, buf, ReduceOp.parse(op), root, segment_bytes)
    return buf.reshape(np.shape(x)) if comm.rank == root else None


def allgather(comm, x: np.ndarray, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> np.ndarray:
    """Every rank's flat `x`, concatenated in rank order, on every rank."""
    return allgather_ring(comm, x, segment_bytes)


def reduce_scatter(comm, x: np.ndarray, op: ReduceOp | str = ReduceOp.SUM,
                   segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> np.ndarray:
    """Chunk `rank` (see `chunk_bounds`) of the reduction of every rank's flat `x`."""
    return reduce_scatter_ring(comm, x, ReduceOp.parse(op), segment_bytes)
