"""`algorithm: auto`: pick the all-reduce (and the all-to-all) algorithm by message size and rank count.

Small messages are latency-bound, so the algorithm with the fewest sequential steps wins:
recursive doubling (log2 p steps, + 2 when N is not a power of two) against the tree's
2 ceil(log2 N) and the ring's 2(N-1). Large messages are bandwidth-bound: ring and halving-doubling
both move the minimum 2(N-1)/N x S per rank, the ring with one neighbour per step. In between,
the ring's 2(N-1) steps cost more than its bytes save, the more so the more ranks there are.

The crossovers were measured with `bench allreduce --algo ring,rd,tree,hd --sizes 4KiB..4MiB
--step 4` (and 16/64 MiB from the README's table) over ZeroMQ and over shm, 2 runs each, on the
2-core development machine. Medians, best first (us):
- 2 ranks: rd best from 4 KiB to 1 MiB on both paths (1 MiB ipc: rd 733, hd 1296, ring 1418)
  and at 4 MiB over shm; the ring from 16 MiB (shm 16 MiB: ring 3.37 GB/s, rd 2.38).
- 4 ranks: rd up to 256 KiB (ipc: rd 1256, tree 1965, ring 2370), hd at 1-4 MiB (4 MiB ipc: hd
  10388, ring 10993, rd 16482), the ring from 16 MiB.
- 8 ranks (on 2 cores): rd/tree tie up to 16 KiB; the tree from 64 KiB to 1 MiB (1 MiB ipc: tree
  7709, hd 8585, ring 14467), hd at 4 MiB, the ring from 16 MiB (shm 16 MiB: ring 1.00 GB/s,
  tree 0.80, hd 0.71; 64 MiB best on both paths).
Checked again over shm at 1-8 MiB, 3 runs: at 4 ranks hd best at 1-4 MiB (4 MiB: hd 3309, ring
3560), the ring at 8 MiB (6329 against hd 7708); at 8 ranks the tree at 1-2 MiB, hd at 4 MiB,
the ring at 8 MiB (14858 against tree 18463).
"""

from collections.abc import Sequence

# Per rank count (up to and including `max_ranks`): (below this many bytes, use this), in order;
# at or above the last bound, the ring.
CROSSOVERS: tuple[tuple[int, tuple[tuple[int, str], ...]], ...] = (
    (2, ((8 << 20, "rd"),)),
    (4, ((512 << 10, "rd"), (8 << 20, "hd"))),
    (1 << 30, ((32 << 10, "rd"), (2 << 20, "tree"), (8 << 20, "hd"))),
)


def choose_allreduce(nbytes: int, n: int) -> str:
    for max_ranks, bands in CROSSOVERS:
        if n <= max_ranks:
            for below, algorithm in bands:
                if nbytes < below:
                    return algorithm
            return "ring"
    return "ring"


# All-to-all without a model's picks: MPICH's rule (MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE 256 B and
# MEDIUM_MSG_SIZE 32 KiB a block; Bruck only from 8 ranks), by the bytes of one block.
BRUCK_BELOW_BLOCK_BYTES, SCATTERED_BELOW_BLOCK_BYTES, BRUCK_FROM_RANKS = 257, 32 << 10, 8


def choose_alltoall(nbytes: int, n: int, picks: Sequence[tuple[int, str]] | None = None) -> str:
    """The all-to-all algorithm for `nbytes` a rank puts in, on `n` ranks: the calibrated model's
    pick where the communicator was given its table (`picks`: (from_bytes, algorithm) bands, from
    sim/calibrated.py's `install_alltoall_picks`), else MPICH's rule."""
    if picks:
        return next((algorithm for start, algorithm in reversed(picks) if nbytes >= start), picks[0][1])
    block = nbytes // max(1, n)
    if block < BRUCK_BELOW_BLOCK_BYTES and n >= BRUCK_FROM_RANKS:
        return "bruck"
    return "scattered" if block < SCATTERED_BELOW_BLOCK_BYTES else "pairwise"
