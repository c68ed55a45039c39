"""Recursive halving-doubling all-reduce (Rabenseifner), for any number of ranks.

Words: p is the largest power of two <= N and `extra` = N - p. The buffer is cut into p *blocks*.
1. Fold: among the first 2*extra ranks, each even rank sends its whole buffer to the odd rank
   after it, which reduces it; the even ranks then sit out. The p remaining ranks get
   *new ranks* 0..p-1.
2. Reduce-scatter by recursive halving: at distance d = p/2, p/4, ..., 1 a rank exchanges with
   new rank (its own XOR d): it keeps the half of its current block range on its own side, sends
   the other half, and reduces the partner's copy of the half it keeps. After log2 p steps new
   rank i holds the fully reduced block i.
3. All-gather by recursive doubling: the same pairs in reverse order swap their ranges, doubling
   what each holds, until every participant has the whole result.
4. Unfold: each odd rank among the first 2*extra sends the result back to the even rank before it.

Cost (alpha-beta): 2 log2 p steps moving S/2 + S/4 + ... = (p-1)/p S each way:
T = 2 log2(p) alpha + 2 (p-1)/p S/beta + (p-1)/p S/gamma (reductions at rate gamma), plus
2 (alpha + S/beta) + S/gamma for the fold when N is not a power of two (playground/models/costs.py). As bandwidth-efficient as the ring with log2 p instead of N-1 latency terms.
Results are bit-identical on all ranks: each block is reduced once, in one order, then copied.
"""

import numpy as np

from playground.collectives.chunks import DEFAULT_SEGMENT_BYTES, ChunkBounds, segment_elems_for, work_buffer
from playground.collectives.ops import ReduceOp
from playground.collectives.transfer import exchange
from playground.trace import CAT_PHASE

TAG_HD = -30


def fold_role(rank: int, size: int) -> tuple[int | None, int | None]:
    """(new rank or None if this rank sits out, folding partner or None)."""
    p = 1 << (size.bit_length() - 1)
    extra = size - p
    if rank < 2 * extra:
        return (None, rank + 1) if rank % 2 == 0 else (rank // 2, rank - 1)
    return rank - extra, None


def old_rank(new_rank: int, size: int) -> int:
    extra = size - (1 << (size.bit_length() - 1))
    return 2 * new_rank + 1 if new_rank < extra else new_rank + extra


def halving_steps(new_rank: int, p: int) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """(partner new rank, blocks to send, blocks to keep) for each recursive-halving step."""
    lo, hi, d, steps = 0, p, p // 2, []
    while d >= 1:
        mid = (lo + hi) // 2
        partner = new_rank ^ d
        if new_rank < partner:
            steps.append((partner, (mid, hi), (lo, mid)))
            hi = mid
        else:
            steps.append((partner, (lo, mid), (mid, hi)))
            lo = mid
        d //= 2
    return steps


def run_folded(comm, buf: np.ndarray, op: ReduceOp, seg: int, tag: int, name: str, core) -> None:
    """Fold the extra ranks into a power-of-two group, run `core(new_rank, p)` there, fold back out.

    Shared by halving-doubling and recursive doubling, which differ only in their core.
    """
    size = comm.size
    whole = (0, buf.size)
    new_rank, partner = fold_role(comm.rank, size)
    if new_rank is None:  # send my data to the odd rank after me, and wait for the result
        exchange(comm, buf, whole, partner, None, None, seg, None, tag, f"{name}.fold")
        exchange(comm, buf, None, None, whole, partner, seg, None, tag, f"{name}.unfold")
        return
    if partner is not None:
        exchange(comm, buf, None, None, whole, partner, seg, op, tag, f"{name}.fold")
    core(new_rank, 1 << (size.bit_length() - 1))
    if partner is not None:
        exchange(comm, buf, whole, partner, None, None, seg, None, tag, f"{name}.unfold")


def allreduce_halving_doubling(
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
    seg = segment_elems_for(segment_bytes, buf.itemsize)

    def core(new_rank: int, p: int) -> None:
        blocks = ChunkBounds(buf.size, p)

        def span(block_range):
            return blocks[block_range[0]][0], blocks[block_range[1] - 1][1]

        steps = halving_steps(new_rank, p)
        with comm.tracer.span("hd.reduce_scatter", CAT_PHASE, steps=len(steps)):
            for peer_new, send_blocks, keep_blocks in steps:
                peer = old_rank(peer_new, comm.size)
                send, keep = span(send_blocks), span(keep_blocks)
                exchange(comm, buf, send, peer, keep, peer, seg, op, TAG_HD, "hd.reduce_scatter")
        with comm.tracer.span("hd.all_gather", CAT_PHASE, steps=len(steps)):
            for peer_new, send_blocks, keep_blocks in reversed(steps):
                peer = old_rank(peer_new, comm.size)
                send, keep = span(keep_blocks), span(send_blocks)
                exchange(comm, buf, send, peer, keep, peer, seg, None, TAG_HD, "hd.all_gather")

    run_folded(comm, buf, op, seg, TAG_HD, "hd", core)
    return buf.reshape(x.shape)
