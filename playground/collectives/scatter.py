"""Scatter: block r of the root's buffer to rank r; linearly or down a binomial tree (gather reversed).

Words as in gather.py: N *blocks* of c elements on the root, vranks relative to it.
- `linear` (NCCL's and Gloo's scatter: a send per rank): the root posts all N-1 blocks at once, each
  to its rank. Cost: T = alpha + (N-1)/N S/beta (S = the root's buffer, nccl-tests' size; busbw =
  algbw x (N-1)/N): the root's out-port carries the blocks back to back.
- `tree` (MPICH's MPIR_Scatter_intra_binomial): the broadcast's binomial tree, each child sent only
  its subtree's blocks, farthest (largest) subtree first. Cost: at a power of two the root's sends
  leave back to back and the last leaf of a subtree of 2^j blocks is done (2^j - 1) S/(N beta) + j
  alpha after its head got them: T = ceil(log2 N) alpha + (N-1)/N S/beta.
"""

import numpy as np

from playground.collectives.chunks import copy_into, empty, is_phantom, local_copy_cost, segment_bounds
from playground.collectives.gather import root_buffer, span_of, subtree_blocks
from playground.collectives.transfer import exchange
from playground.collectives.tree import reduce_schedule
from playground.tracing.trace import CAT_PHASE

TAG_SCATTER = -71


def to_vrank_order(source: np.ndarray, root: int, size: int) -> np.ndarray:
    """The root's flat buffer with its blocks in vrank order (block v is rank v + root's): itself at
    root 0, else a rotated copy."""
    if root == 0:
        return source
    if is_phantom(source):
        local_copy_cost(source.size * source.itemsize)
        return source
    return np.take(source.reshape(size, -1), (np.arange(size) + root) % size, axis=0).reshape(-1)


def scatter_linear(comm, source: np.ndarray | None, part: np.ndarray, root: int, segment_elems: int) -> None:
    """Block r of the root's flat `source` (N c elements; None elsewhere) into rank r's `part` (c):
    the root sends every block at once."""
    c, size = part.size, comm.size
    with comm.tracer.span("scatter.linear", CAT_PHASE):
        if comm.rank != root:
            exchange(comm, part, None, None, (0, c), root, segment_elems, None, TAG_SCATTER, "scatter")
            return
        source = root_buffer(source, "scatter")
        sends = [
            comm.isend_lent(source[a:b], dst, TAG_SCATTER)
            for dst in ((root + k) % size for k in range(1, size))
            for a, b in segment_bounds(dst * c, (dst + 1) * c, segment_elems)
        ]
        copy_into(part, source[root * c : (root + 1) * c])
        for req in sends:
            req.wait()


def scatter_tree(comm, source: np.ndarray | None, part: np.ndarray, root: int, segment_elems: int) -> None:
    """As `scatter_linear`, down the binomial tree: a rank gets its subtree's blocks and passes each
    child its own subtree's, farthest first."""
    size, c = comm.size, part.size
    vrank = (comm.rank - root) % size
    _, parent = reduce_schedule(vrank, size)
    span = span_of(vrank, size)
    with comm.tracer.span("scatter.tree", CAT_PHASE):
        if parent is None:
            stage = to_vrank_order(root_buffer(source, "scatter"), root, size)
        else:
            stage = empty(span * c, like=part)
            src = (parent + root) % size
            exchange(
                comm, stage, None, None, (0, span * c), src, segment_elems, None, TAG_SCATTER, "scatter.tree"
            )
        sends = [
            comm.isend_lent(stage[a:b], (child + root) % size, TAG_SCATTER)
            for child, blocks in reversed(subtree_blocks(vrank, size))
            for a, b in segment_bounds((child - vrank) * c, (child - vrank + blocks) * c, segment_elems)
        ]
        copy_into(part, stage[:c])
        for req in sends:
            req.wait()
