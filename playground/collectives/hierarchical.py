"""Hierarchical all-reduce: reduce-scatter inside each node, all-reduce across nodes, all-gather inside.

Words: N ranks sit in `num_nodes` nodes of k (blocks: ranks 0..k-1 on node 0, ...). Inside a node
the links are fast (NVLink, shared memory), between nodes slow (a NIC). Three phases:
1. Ring reduce-scatter inside the node: local rank i ends with chunk i of the node's sum.
2. All-reduce of that chunk across nodes, among the ranks with the same local index (one per
   node): each of the k "rails" carries S/k bytes, in parallel.
3. Ring all-gather inside the node: every rank gets every chunk.
Cost (alpha-beta, intra link a1/b1, inter a2/b2, ring across nodes):
  T = 2(k-1)(a1 + S/(k b1)) + 2(m-1)(a2 + S/(k m b2)) + gamma terms, for m nodes;
the slow links carry S/k per rank instead of S: the reason NCCL and Horovod go hierarchical.
Results are bit-identical on all ranks: each chunk is reduced in one order, then copied.
"""

import numpy as np

from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, ChunkBounds, segment_elems_for, work_buffer
from playground.collectives.ops import ReduceOp
from playground.collectives.ring import allgather_pass, allreduce_ring, reduce_scatter_into
from playground.comm.group import Group
from playground.core.errors import UsageError
from playground.tracing.trace import CAT_PHASE

TAG_HIER = -50
TAG_INTRA, TAG_INTER = -100, -200  # group tag offsets: the two groups of a rank never mix messages


def node_groups(rank: int, size: int, ranks_per_node: int) -> tuple[list[int], list[int]]:
    """(the ranks of `rank`'s node, the ranks with its local index on every node), in order."""
    if ranks_per_node < 1 or size % ranks_per_node:
        raise UsageError(
            f"hier: ranks_per_node must divide the {size} ranks into whole nodes, got {ranks_per_node}"
        )
    node, local = divmod(rank, ranks_per_node)
    intra = [node * ranks_per_node + i for i in range(ranks_per_node)]
    inter = [j * ranks_per_node + local for j in range(size // ranks_per_node)]
    return intra, inter


def allreduce_hierarchical(
    comm,
    x: np.ndarray,
    op: ReduceOp = ReduceOp.SUM,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inplace: bool = False,
    ranks_per_node: int | None = None,
) -> np.ndarray:
    """All ranks end with op-reduction of every rank's `x`, bit-identical, equal to numpy's (in `x`
    itself with `inplace`). `ranks_per_node` defaults to the communicator's placement."""
    buf = work_buffer(x, inplace)
    k = ranks_per_node or comm.ranks_per_node
    if comm.size == 1 or buf.size == 0:
        return buf.reshape(x.shape)
    intra_ranks, inter_ranks = node_groups(comm.rank, comm.size, k)
    intra = Group(comm, intra_ranks, TAG_INTRA)
    inter = Group(comm, inter_ranks, TAG_INTER)
    bounds = ChunkBounds(buf.size, intra.size)
    seg = segment_elems_for(segment_bytes, buf.itemsize)
    a, b = bounds[intra.rank]
    if intra.size > 1:
        reduce_scatter_into(intra, buf, buf, bounds, seg, op, TAG_HIER)  # in place, as the ring does
    if inter.size > 1 and b > a:
        with comm.tracer.span("hier.across_nodes", CAT_PHASE, nodes=inter.size):
            allreduce_ring(inter, buf[a:b], op, segment_bytes, inplace=True)
    if intra.size > 1:
        allgather_pass(intra, buf, bounds, seg, TAG_HIER)
    return buf.reshape(x.shape)
