"""Collective operations over a Communicator; one module per algorithm behind one dispatcher.

Every function is collective: all ranks call it in the same order with the same count and
dtype. Results are bit-identical on all ranks and equal numpy's reduction of the inputs. Each call
is numbered on its communicator (`comm.collective`), so an error names the collective and its
sequence number, as NCCL's watchdog does, and is matched: given its input and op, so ranks that
called different collectives (another op, size, dtype) fail at once naming both (comm/desync.py).
"""

import numpy as np

from playground.collectives import registry
from playground.collectives.auto import choose_allreduce
from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, ChunkBounds, segment_bytes_for, work_buffer
from playground.collectives.ops import ReduceOp
from playground.collectives.ring import allgather_ring, reduce_scatter_ring
from playground.collectives.tree import broadcast_tree_into, reduce_tree_into
from playground.core.errors import UsageError

# The names each collective offers (with "auto" where it picks by size), from the registry.
ALGORITHMS: dict[str, tuple[str, ...]] = {c: registry.names(c) for c in registry.COLLECTIVES}
_ALLREDUCE = {a.name: a for a in registry.REGISTRY if a.collective == "allreduce"}  # one lookup a call
IN_PLACE = ("allreduce", "broadcast", "reduce")  # what run_collective measures in place too

__all__ = [
    "ReduceOp",
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "ChunkBounds",
    "run_collective",
    "ALGORITHMS",
    "DEFAULT_SEGMENT_BYTES",
    "IN_PLACE",
]


def allreduce(
    comm,
    x: np.ndarray,
    op: ReduceOp | str = ReduceOp.SUM,
    algorithm: str = "ring",
    segment_bytes: int | None = None,
    inplace: bool = False,
    ranks_per_node: int | None = None,
) -> np.ndarray:
    """op-reduction of every rank's `x`, as a new array on every rank (`x` is not modified); with
    `inplace`, written into `x` itself (a writable C-contiguous array), which is returned.
    `ranks_per_node` groups ranks into nodes for an algorithm that needs nodes (`hier`; default:
    by host, `comm.ranks_per_node`)."""
    segment_bytes = segment_bytes or comm.segment_bytes  # the transport's (chunks.segment_bytes_for)
    algo = _ALLREDUCE.get(algorithm)
    if algo is None:
        if algorithm != registry.AUTO:
            raise UsageError(
                f"unknown all-reduce algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS['allreduce'])}"
            )
        algo = _ALLREDUCE[choose_allreduce(np.asarray(x).nbytes, comm.size)]
    if type(op) is not ReduceOp:
        op = ReduceOp.parse(op)
    comm.begin_collective("allreduce", algo.name, x, op)  # not a `with`: this is an 8-byte all-reduce's path
    try:
        if algo.on_nodes:
            result = algo.run(comm, x, op, segment_bytes, inplace, ranks_per_node)
        else:
            result = algo.run(comm, x, op, segment_bytes, inplace)
    except BaseException:
        comm.end_collective(False)
        raise
    comm.end_collective()
    return x if inplace else result


def broadcast(
    comm, x: np.ndarray, root: int = 0, segment_bytes: int | None = None, inplace: bool = False
) -> np.ndarray:
    """`root`'s `x` on every rank (every rank passes an array of the same shape and dtype); with
    `inplace`, written into `x` itself (a writable C-contiguous array), which is returned."""
    segment_bytes = segment_bytes or segment_bytes_for(comm)
    buf = work_buffer(x, inplace)
    if comm.size > 1 and buf.size:
        with comm.collective("broadcast", "tree", buf):
            broadcast_tree_into(comm, buf, root, segment_bytes)
    return x if inplace else buf.reshape(np.shape(x))


def reduce(
    comm,
    x: np.ndarray,
    op: ReduceOp | str = ReduceOp.SUM,
    root: int = 0,
    segment_bytes: int | None = None,
    inplace: bool = False,
) -> np.ndarray | None:
    """The reduction on `root`; None on the other ranks. With `inplace` (MPI_IN_PLACE at the root),
    the root's result is written into its `x`, and the other ranks' `x` may be used as scratch."""
    segment_bytes = segment_bytes or segment_bytes_for(comm)
    buf = work_buffer(x, inplace)
    op = ReduceOp.parse(op)
    if comm.size > 1 and buf.size:
        with comm.collective("reduce", "tree", buf, op):
            reduce_tree_into(comm, buf, op, root, segment_bytes)
    if comm.rank != root:
        return None
    return x if inplace else buf.reshape(np.shape(x))


def allgather(comm, x: np.ndarray, segment_bytes: int | None = None, inplace: bool = False) -> np.ndarray:
    """Every rank's flat `x`, concatenated in rank order, on every rank; with `inplace`, `x` is the
    whole output (chunks as `ChunkBounds(x.size, N)`) holding this rank's chunk, and the others
    are gathered into it (the inverse of an in-place `reduce_scatter`)."""
    segment_bytes = segment_bytes or segment_bytes_for(comm)
    with comm.collective("allgather", "ring", x):
        return allgather_ring(comm, x, segment_bytes, inplace)


def reduce_scatter(
    comm,
    x: np.ndarray,
    op: ReduceOp | str = ReduceOp.SUM,
    segment_bytes: int | None = None,
    inplace: bool = False,
) -> np.ndarray:
    """Chunk `rank` (see `ChunkBounds`) of the reduction of every rank's flat `x`; with `inplace`,
    written over chunk `rank` of `x` itself and returned as a view of it."""
    segment_bytes = segment_bytes or segment_bytes_for(comm)
    op = ReduceOp.parse(op)
    with comm.collective("reduce_scatter", "ring", x, op):
        return reduce_scatter_ring(comm, x, op, segment_bytes, inplace)


def run_collective(
    comm,
    collective: str,
    x: np.ndarray,
    op: ReduceOp | str = ReduceOp.SUM,
    algorithm: str = "auto",
    segment_bytes: int | None = None,
    inplace: bool = False,
    ranks_per_node: int | None = None,
) -> np.ndarray | None:
    """Dispatch by name (what benchmarks and scenarios use); roots are rank 0; the all-reduce,
    broadcast and reduce are measured in place too (`IN_PLACE`; an in-place all-gather or
    reduce-scatter takes differently shaped buffers: call them directly)."""
    if collective == "allreduce":
        return allreduce(comm, x, op, algorithm, segment_bytes, inplace, ranks_per_node)
    if inplace and collective not in IN_PLACE:
        raise UsageError(f"{collective}: only {', '.join(IN_PLACE)} work in place")
    if collective == "allgather":
        return allgather(comm, x, segment_bytes)
    if collective == "reduce_scatter":
        return reduce_scatter(comm, x, op, segment_bytes)
    if collective == "broadcast":
        return broadcast(comm, x, 0, segment_bytes, inplace)
    if collective == "reduce":
        return reduce(comm, x, op, 0, segment_bytes, inplace)
    raise UsageError(f"unknown collective {collective!r}; allowed: {', '.join(ALGORITHMS)}")
