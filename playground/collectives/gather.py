"""Gather: every rank's block, in rank order, on the root; linearly or up a binomial tree.

Words: each rank contributes one *block* of c elements; the root's output is the N blocks in rank
order. Ranks are renumbered relative to the root (vrank = (rank - root) mod N), as in tree.py.
- `linear` (NCCL's and Gloo's gather: a send per rank): every other rank sends its block straight to
  the root, which takes them in turn. Cost: the root's in-port carries N-1 blocks back to back,
  T = alpha + (N-1)/N S/beta (S = the gathered output, nccl-tests' size; busbw = algbw x (N-1)/N).
- `tree` (MPICH's MPIR_Gather_intra_binomial): the reduce's binomial tree without the reduction: a
  rank gathers its subtree (its children's blocks, vranks v..v+span-1, in a staging buffer) and sends
  it up whole. Cost: at a power of two the subtree of 2^j blocks is complete after
  sum_{i<j} (alpha + 2^i S/(N beta)), so T = ceil(log2 N) alpha + (N-1)/N S/beta: the same bytes
  into the root, in log2 N messages instead of N-1 (the simulator is the reference at other N).
"""

import numpy as np

from playground.collectives.chunks import copy_into, empty, is_phantom, local_copy_cost
from playground.collectives.transfer import exchange
from playground.collectives.tree import reduce_schedule
from playground.core.errors import UsageError
from playground.tracing.trace import CAT_PHASE

TAG_GATHER = -70


def subtree_blocks(vrank: int, size: int) -> list[tuple[int, int]]:
    """(child vrank, blocks of its subtree) for each child of `vrank` in the binomial tree, in the
    order the reduce receives them (nearest first)."""
    children, _ = reduce_schedule(vrank, size)
    return [(child, min(child - vrank, size - child)) for child in children]


def span_of(vrank: int, size: int) -> int:
    """The blocks in `vrank`'s subtree, its own included."""
    return 1 + sum(blocks for _, blocks in subtree_blocks(vrank, size))


def to_rank_order(staged: np.ndarray, root: int, size: int, out: np.ndarray) -> None:
    """out = the root's staging (blocks in vrank order) in rank order: block r is vrank r - root."""
    if root == 0:
        copy_into(out, staged)
    elif is_phantom(out) or is_phantom(staged):
        local_copy_cost(out.size * out.itemsize)
    else:
        np.take(staged.reshape(size, -1), (np.arange(size) - root) % size, axis=0, out=out.reshape(size, -1))


def gather_linear(comm, part: np.ndarray, out: np.ndarray | None, root: int, segment_elems: int) -> None:
    """Every rank's flat `part` (c elements) into `out` (N c, the root's; None elsewhere) at its rank's
    block: the root receives from each rank in turn."""
    c, size = part.size, comm.size
    with comm.tracer.span("gather.linear", CAT_PHASE):
        if comm.rank != root:
            _send(comm, part, (0, c), root, segment_elems, "gather")
            return
        out = root_buffer(out, "gather")
        copy_into(out[root * c : (root + 1) * c], part)
        for src in ((root + k) % size for k in range(1, size)):
            _recv(comm, out, (src * c, (src + 1) * c), src, segment_elems, "gather")


def gather_tree(comm, part: np.ndarray, out: np.ndarray | None, root: int, segment_elems: int) -> None:
    """As `gather_linear`, up the binomial tree: a rank sends its whole subtree's blocks at once."""
    size, c = comm.size, part.size
    vrank = (comm.rank - root) % size
    _, parent = reduce_schedule(vrank, size)
    span = span_of(vrank, size)
    stage = root_buffer(out, "gather") if (parent is None and root == 0) else empty(span * c, like=part)
    with comm.tracer.span("gather.tree", CAT_PHASE):
        copy_into(stage[:c], part)
        for child, blocks in subtree_blocks(vrank, size):
            first = (child - vrank) * c
            _recv(
                comm, stage, (first, first + blocks * c), (child + root) % size, segment_elems, "gather.tree"
            )
        if parent is not None:
            _send(comm, stage, (0, span * c), (parent + root) % size, segment_elems, "gather.tree")
        elif stage is not out:
            to_rank_order(stage, root, size, root_buffer(out, "gather"))


def root_buffer(out: np.ndarray | None, collective: str) -> np.ndarray:
    """The root's buffer, which the dispatcher always passes (None elsewhere)."""
    if out is None:
        raise UsageError(f"{collective}: the root needs its buffer, got None", field="out")
    return out


def _send(comm, buf: np.ndarray, bounds: tuple[int, int], dst: int, segment_elems: int, what: str) -> None:
    exchange(comm, buf, bounds, dst, None, None, segment_elems, None, TAG_GATHER, what, lend=True)


def _recv(comm, buf: np.ndarray, bounds: tuple[int, int], src: int, segment_elems: int, what: str) -> None:
    exchange(comm, buf, None, None, bounds, src, segment_elems, None, TAG_GATHER, what)
