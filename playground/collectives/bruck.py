"""Bruck's all-to-all: ceil(log2 N) messages per rank instead of N-1, each carrying about half the data.

Bruck, Ho, Kipnis, Upfal and Weathersby (1997), as MPICH runs it for short messages at 8 ranks and
more (MPIR_Alltoall_intra_brucks). Words: N equal *blocks* of c elements per rank, a working buffer
`work` of N blocks, and *steps* k = 0..L-1 (L = ceil(log2 N)):
1. rotate: work[i] = this rank's block for rank + i (mod N), so a block's index is how far it has
   still to travel;
2. at step k every block whose index has bit k set travels 2^k ranks on: rank r *packs* those blocks
   into one message to r + 2^k and unpacks the message from r - 2^k into the same indices. After the
   L steps every block has travelled its index, so work[i] holds the block that rank r - i sent to r;
3. unrotate: out[(r - i) mod N] = work[i].
Every rank sends exactly the blocks with bit k set at step k, so all messages of a step are the same
length and all ranks' timelines are one (the simulator folds it).

Cost (alpha-beta, S each rank's input, B_k the indices below N with bit k set): sum over k of
(alpha + B_k S/(N beta)); at a power of two B_k = N/2, so T = log2(N) (alpha + S/(2 beta)). Few
alphas, but each block crosses up to log2 N links: log2(N)/2 S bytes each way instead of the
pairwise exchange's (N-1)/N S; the rotations and packing are local copies (3 S, on top of the
messages) the alpha-beta model leaves out and the calibrated simulator charges.
"""

import functools
from collections.abc import Sequence

import numpy as np

from playground.collectives.chunks import empty, is_phantom, phantom_call
from playground.collectives.transfer import exchange
from playground.tracing.trace import CAT_PHASE

TAG_BRUCK = -61
ROW_COPY_FROM_BYTES = 4096  # blocks from this size are moved one memcpy a row (see _take)


def bruck_steps(size: int) -> int:
    """L = ceil(log2 N): the steps a rank sends in."""
    return (size - 1).bit_length()


def bruck_blocks(size: int, step: int) -> list[int]:
    """The block indices that travel at `step`: those below N with bit `step` set."""
    return [i for i in range(size) if i >> step & 1]


def bruck_peers(rank: int, size: int, step: int) -> tuple[int, int]:
    """(send_to, recv_from) at `step`: rank + 2^step and rank - 2^step, mod N."""
    return (rank + (1 << step)) % size, (rank - (1 << step)) % size


def rotation(rank: int, size: int) -> np.ndarray:
    """Step 1's order: work[i] = the input's block rank + i (mod N)."""
    return (rank + np.arange(size)) % size


def unrotation(rank: int, size: int) -> np.ndarray:
    """Step 3's order: out[j] = work[rank - j (mod N)], the block rank j sent to `rank`."""
    return (rank - np.arange(size)) % size


@functools.lru_cache(maxsize=64)
def schedule(rank: int, size: int) -> tuple[np.ndarray, np.ndarray, tuple[tuple[np.ndarray, int, int], ...]]:
    """(rotation, unrotation, per step (block indices, send_to, recv_from)) of `rank`, made once: a
    short all-to-all is what Bruck's algorithm is for, and its Python is most of its time."""
    steps = tuple(
        (np.array(bruck_blocks(size, k), dtype=np.intp), *bruck_peers(rank, size, k))
        for k in range(bruck_steps(size))
    )
    return rotation(rank, size), unrotation(rank, size), steps


def alltoall_bruck_into(comm, source: np.ndarray, out: np.ndarray, block: int, segment_elems: int) -> None:
    """Rank r's `out` = block r of every rank's flat `source` (N blocks of `block` elements), in rank
    order, by Bruck's L steps."""
    rank, size = comm.rank, comm.size
    rotate, unrotate, steps = schedule(rank, size)
    work = empty(size * block, like=source).reshape(size, block)
    _take(source.reshape(size, block), rotate, work)
    pack = empty(max(len(idx) for idx, _, _ in steps) * block, like=source)
    land = empty(pack.size, like=source)
    with comm.tracer.span("alltoall.bruck", CAT_PHASE, steps=len(steps)):
        for step, (idx, send_to, recv_from) in enumerate(steps):
            n = len(idx) * block
            _take(work, idx, pack[:n].reshape(len(idx), block))
            exchange(
                comm,
                land,
                (0, n),
                send_to,
                (0, n),
                recv_from,
                segment_elems,
                None,
                TAG_BRUCK,
                "alltoall.bruck",
                step,
                source=pack,
            )
            _scatter(land[:n], work, idx)
    _take(work, unrotate, out.reshape(size, block))


def _take(blocks: np.ndarray, idx: Sequence[int] | np.ndarray, into: np.ndarray) -> None:
    """Rows `idx` of `blocks` (rows of one block each), in that order, into the rows of `into`."""
    row_bytes = blocks.shape[1] * blocks.itemsize
    if is_phantom(into.reshape(-1)) or is_phantom(blocks.reshape(-1)):
        rows, dst = _stand_in(blocks), _stand_in(into)
        phantom_call(lambda: _take_rows(rows, idx, dst, row_bytes), into.size * into.itemsize)
        return
    _take_rows(blocks, idx, into, row_bytes)


def _take_rows(blocks: np.ndarray, idx: Sequence[int] | np.ndarray, into: np.ndarray, row_bytes: int) -> None:
    if row_bytes < ROW_COPY_FROM_BYTES:
        np.take(blocks, idx, axis=0, out=into)
        return
    for row, i in zip(into, idx, strict=True):  # np.take into `out` goes element by element: 15x slower
        np.copyto(row, blocks[i])


def _scatter(packed: np.ndarray, work: np.ndarray, idx: Sequence[int] | np.ndarray) -> None:
    """Unpack `packed` into rows `idx` of `work`."""
    if is_phantom(packed) or is_phantom(work.reshape(-1)):
        rows, into = _stand_in(packed.reshape(len(idx), -1)), _stand_in(work)
        phantom_call(lambda: into.__setitem__(idx, rows), packed.size * packed.itemsize)
        return
    work[idx] = packed.reshape(len(idx), -1)


def _stand_in(rows: np.ndarray) -> np.ndarray:
    """A real array of one element a row of phantom `rows`: the moves above make their calls on it in
    a data-free simulation (chunks.phantom_call), which times them: a short all-to-all spends most of
    its time in them."""
    return np.zeros((rows.shape[0], 1), dtype=rows.dtype)
