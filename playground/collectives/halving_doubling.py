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

Forwarding: the half a rank keeps at the first reduce-scatter step is split at the second into a
half it keeps and a half it sends. Where that sent half's segments are some of the first step's
(the cut falls on a segment boundary: a large buffer), each of them is reduced straight into the
message for the second partner (`isend_computed`: on shared memory, into the ring slot the partner
reads), as the ring forwards its chunks, instead of into the buffer and then copied out at the next
step: two memory passes fewer per forwarded byte (S/4 of each rank's 7.9 S at 8 ranks). Both sides of the
first step take its segments in one order, the forwarded ones first (`forwarding_order`), so every
rank's timeline stays the same whichever half it forwards. Only the first step forwards: at later
ones the order a segment must arrive in would depend on three steps' cuts.

Cost (alpha-beta): 2 log2 p steps moving S/2 + S/4 + ... = (p-1)/p S each way:
T = 2 log2(p) alpha + 2 (p-1)/p S/beta + (p-1)/p S/gamma (reductions at rate gamma), plus
2 (alpha + S/beta) + S/gamma for the fold when N is not a power of two (playground/models/costs.py). As bandwidth-efficient as the ring with log2 p instead of N-1 latency terms.
Results are bit-identical on all ranks: each block is reduced once, in one order, then copied.
"""

import numpy as np

from playground.collectives.chunks import (
    DEFAULT_SEGMENT_BYTES,
    ChunkBounds,
    segment_bounds,
    segment_elems_for,
    work_buffer,
)
from playground.collectives.ops import ReduceOp
from playground.collectives.transfer import count_mismatch, exchange
from playground.tracing.trace import CAT_PHASE

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


def forwardable(keep: tuple[int, int], ahead: tuple[int, int], seg: int) -> frozenset[tuple[int, int]]:
    """The segments of `keep` that are also the segments the next step sends (`ahead`): all of
    them, or none when the next step cuts its range elsewhere (then it sends from the buffer)."""
    mine, theirs = segment_bounds(*keep, seg), segment_bounds(*ahead, seg)
    return frozenset(theirs) if ahead[1] > ahead[0] and set(theirs) <= set(mine) else frozenset()


def forwarding_order(
    span: tuple[int, int], ahead: frozenset[tuple[int, int]], seg: int
) -> list[tuple[int, int]]:
    """The segments of `span` in the order both sides take them: the forwarded ones (`ahead`) first,
    so the next partner gets them soonest and every rank's timeline is the same whichever half it
    forwards (the simulator's folded mode relies on it), then the rest, each part ascending."""
    segments = segment_bounds(*span, seg)
    return [s for s in segments if s in ahead] + [s for s in segments if s not in ahead]


def reduce_forwarding(comm, buf, keep, peer, seg, op, tag, ahead, next_peer) -> list:
    """Reduce `peer`'s copy of buf[keep] in, segment by segment in `forwarding_order`; the segments
    in `ahead` go straight into messages to `next_peer` (their requests are returned), the rest
    into buf."""
    ufunc, dtype, forwards = op.ufunc, buf.dtype, []
    a = b = 0

    def check(got: int) -> None:
        if got != b - a:
            raise count_mismatch(comm, peer, tag, "hd.reduce_scatter", got, b - a)

    def fill(out):  # called by isend_computed before it returns: a and b are this segment's
        check(comm.recv_reduce(peer, tag, out, ufunc, base=buf[a:b]))

    for a, b in forwarding_order(keep, ahead, seg):
        if (a, b) in ahead:
            forwards.append(comm.isend_computed(next_peer, tag, b - a, dtype, fill))
        else:
            check(comm.recv_reduce(peer, tag, buf[a:b], ufunc))
    return forwards


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
        steps = halving_steps(new_rank, p)
        with comm.tracer.span("hd.reduce_scatter", CAT_PHASE, steps=len(steps)):
            _reduce_scatter(comm, buf, op, seg, blocks, new_rank, p)
        with comm.tracer.span("hd.all_gather", CAT_PHASE, steps=len(steps)):
            for peer_new, send_blocks, keep_blocks in reversed(steps):
                peer = old_rank(peer_new, comm.size)
                send, keep = _span(blocks, keep_blocks), _span(blocks, send_blocks)
                exchange(comm, buf, send, peer, keep, peer, seg, None, TAG_HD, "hd.all_gather")

    run_folded(comm, buf, op, seg, TAG_HD, "hd", core)
    return buf.reshape(x.shape)


def _span(blocks: ChunkBounds, block_range: tuple[int, int]) -> tuple[int, int]:
    """The elements of blocks [first, stop) of the buffer."""
    return blocks[block_range[0]][0], blocks[block_range[1] - 1][1]


def _reduce_scatter(
    comm, buf: np.ndarray, op: ReduceOp, seg: int, blocks: ChunkBounds, new_rank: int, p: int
) -> None:
    """The halving steps of rank `new_rank` of the `p` that remain after folding: send one half,
    reduce the other into `buf`. The first step forwards, segment by segment, what the second step
    sends on (`forwarding`), so the second step's half goes out while the first is still arriving."""
    steps = halving_steps(new_rank, p)
    sent, forwards = False, []  # sent: this step's half went out during the step before
    for k, (peer_new, send_blocks, keep_blocks) in enumerate(steps):
        peer = old_rank(peer_new, comm.size)
        send, keep = _span(blocks, send_blocks), _span(blocks, keep_blocks)
        # what this rank, and what its peer, forwards
        ahead: frozenset[tuple[int, int]] = frozenset()
        theirs: frozenset[tuple[int, int]] = frozenset()
        if k == 0 and len(steps) > 1:  # (later steps would need the orders of three steps to agree)
            next_peer, ahead_range = old_rank(steps[1][0], comm.size), _span(blocks, steps[1][1])
            ahead = forwardable(keep, ahead_range, seg)
            theirs = forwardable(send, _span(blocks, halving_steps(peer_new, p)[1][1]), seg)
        if not ahead and not theirs:
            exchange(
                comm, buf, None if sent else send, peer, keep, peer, seg, op, TAG_HD, "hd.reduce_scatter"
            )
        else:
            order = [] if sent else forwarding_order(send, theirs, seg)
            sends = [comm.isend(buf[a:b], peer, TAG_HD) for a, b in order]
            forwards += reduce_forwarding(comm, buf, keep, peer, seg, op, TAG_HD, ahead, next_peer)
            for req in sends:
                req.wait()
        sent = bool(ahead)
    for req in forwards:
        req.wait()
