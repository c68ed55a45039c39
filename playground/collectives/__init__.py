"""Collective operations over a Communicator; one module per algorithm behind one dispatcher.

Every function is collective: all ranks call it in the same order with the same count and
dtype. Results are bit-identical on all ranks and equal numpy's reduction of the inputs. Each call
is numbered on its communicator (`comm.collective`), so an error names the collective and its
sequence number, as NCCL's watchdog does, and is matched: given its input (and op), so ranks that
called different collectives (another op, size, dtype) fail at once naming both (comm/desync.py).
alltoallv, whose counts differ by rank, only names itself.
"""

from collections.abc import Sequence

import numpy as np

from playground.collectives import registry
from playground.collectives.alltoall import alltoall, alltoallv
from playground.collectives.auto import choose_allreduce
from playground.collectives.chunks import (
    DEFAULT_SEGMENT_BYTES,
    ChunkBounds,
    copy_into,
    empty,
    flat,
    segment_bytes_for,
    segment_elems_for,
    work_buffer,
)
from playground.collectives.gather import root_buffer
from playground.collectives.ops import ReduceOp, average_into
from playground.collectives.ring import allgather_ring, reduce_scatter_ring
from playground.collectives.sendrecv import sendrecv_ring
from playground.collectives.tree import broadcast_tree_into, reduce_tree_into
from playground.core.errors import UsageError

# The names each collective offers (with "auto" where it picks by size), from the registry.
ALGORITHMS: dict[str, tuple[str, ...]] = {c: registry.names(c) for c in registry.COLLECTIVES}
_ALLREDUCE = {a.name: a for a in registry.REGISTRY if a.collective == "allreduce"}  # one lookup a call
# what run_collective measures in place too (an in-place all-gather or reduce-scatter takes
# differently shaped buffers: call them directly)
IN_PLACE = ("allreduce", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv")

__all__ = [
    "ReduceOp",
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "alltoallv",
    "gather",
    "scatter",
    "sendrecv",
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
    if op.averages:
        average_into(work_buffer(x, True) if inplace else result.reshape(-1), comm.size)
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
    if op.averages:
        average_into(buf, comm.size)
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
        out = reduce_scatter_ring(comm, x, op, segment_bytes, inplace)
    if op.averages:
        average_into(out, comm.size)
    return out


def gather(
    comm,
    x: np.ndarray,
    root: int = 0,
    algorithm: str = "tree",
    segment_bytes: int | None = None,
    inplace: bool = False,
) -> np.ndarray | None:
    """Every rank's flat `x`, concatenated in rank order, on `root`; None on the others. With
    `inplace`, `x` is the whole output on every rank (N equal blocks: nccl-tests' in-place gather),
    holding this rank's block in its place; the root's gets the others and is returned.
    `algorithm`: tree (binomial) or linear."""
    algo = registry.get("gather", algorithm)
    n, rank = comm.size, comm.rank
    out: np.ndarray | None
    if inplace:
        whole = work_buffer(x, True)
        c = _equal_blocks(whole.size, n, "gather")
        part, out = whole[rank * c : (rank + 1) * c], whole
    else:
        part = flat(x)
        out = empty(part.size * n, like=part) if rank == root else None
    if n == 1:
        copy_into(root_buffer(out, "gather"), part)  # one rank: the root
    else:
        seg = _segment_elems(comm, segment_bytes, part)
        with comm.collective("gather", algo.name, part):
            algo.run(comm, part, out if rank == root else None, root, seg)
    return (x if inplace else out) if rank == root else None


def scatter(
    comm,
    x: np.ndarray,
    root: int = 0,
    algorithm: str = "tree",
    segment_bytes: int | None = None,
    inplace: bool = False,
) -> np.ndarray:
    """Block r of `root`'s flat `x` (N equal blocks) on rank r, as a new array; every rank passes an
    `x` of the same length and dtype (only the root's is read, as `broadcast`). With `inplace`,
    written into block r of `x` itself and returned as a view of it. `algorithm`: tree or linear."""
    algo = registry.get("scatter", algorithm)
    n, rank = comm.size, comm.rank
    buf = work_buffer(x, True) if inplace else flat(x)
    c = _equal_blocks(buf.size, n, "scatter")
    part = buf[rank * c : (rank + 1) * c] if inplace else empty(c, like=buf)
    if n == 1:
        copy_into(part, buf[:c])
    else:
        with comm.collective("scatter", algo.name, buf):
            algo.run(
                comm, buf if rank == root else None, part, root, _segment_elems(comm, segment_bytes, buf)
            )
    return part


def sendrecv(
    comm, x: np.ndarray, shift: int = 1, segment_bytes: int | None = None, inplace: bool = False
) -> np.ndarray:
    """Rank r - `shift`'s `x` on rank r (every rank sends its `x` to rank + shift at once: a ring
    shift, nccl-tests' sendrecv), as a new array of `x`'s shape; with `inplace`, written over `x`
    (writable, C-contiguous) once it has left, and `x` is returned."""
    source = flat(x)
    out = empty(source.size, like=source)
    seg = _segment_elems(comm, segment_bytes, source)
    comm.begin_collective("sendrecv", "ring", source)  # not a `with`: a small send/recv's path
    try:
        sendrecv_ring(comm, source, out, shift, seg)
    except BaseException:
        comm.end_collective(False)
        raise
    comm.end_collective()
    if inplace:
        copy_into(work_buffer(x, True), out)
        return x
    return out.reshape(np.shape(x))


def _equal_blocks(count: int, n: int, collective: str) -> int:
    if count % n:
        raise UsageError(f"{collective}: {count} elements do not cut into {n} equal blocks", field="x")
    return count // n


def _segment_elems(comm, segment_bytes: int | None, x: np.ndarray) -> int:
    return segment_elems_for(segment_bytes or comm.segment_bytes, x.itemsize)


def run_collective(
    comm,
    collective: str,
    x: np.ndarray,
    op: ReduceOp | str = ReduceOp.SUM,
    algorithm: str = "auto",
    segment_bytes: int | None = None,
    inplace: bool = False,
    ranks_per_node: int | None = None,
    counts: Sequence[Sequence[int]] | None = None,
) -> np.ndarray | None:
    """Dispatch by name (what benchmarks and scenarios use); roots are rank 0; `IN_PLACE` says which
    are measured in place too; an algorithm given for a collective that has one (broadcast's tree)
    is that one. alltoallv's `counts[r]` are rank r's send counts (default: the benchmark's uneven
    layout of `x`, with zeros: check.uneven_counts)."""
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
    if collective == "alltoall":
        return alltoall(comm, x, algorithm, segment_bytes, inplace)
    if collective == "alltoallv":
        from playground.collectives.check import uneven_counts

        matrix = counts if counts is not None else uneven_counts(comm.size, np.size(x))
        recv = [row[comm.rank] for row in matrix]
        return alltoallv(comm, x, matrix[comm.rank], recv, _own(algorithm, "scattered"), segment_bytes)
    if collective == "gather":
        return gather(comm, x, 0, _own(algorithm, "tree"), segment_bytes, inplace)
    if collective == "scatter":
        return scatter(comm, x, 0, _own(algorithm, "tree"), segment_bytes, inplace)
    if collective == "sendrecv":
        return sendrecv(comm, x, 1, segment_bytes, inplace)
    raise UsageError(f"unknown collective {collective!r}; allowed: {', '.join(ALGORITHMS)}")


def _own(algorithm: str, default: str) -> str:
    """`algorithm`, or the collective's default for `auto` (which only some collectives offer)."""
    return default if algorithm == registry.AUTO else algorithm
