"""`algorithm: auto`: pick the all-reduce algorithm by message size and rank count.

Small messages are latency-bound, so the algorithm with the fewest sequential steps wins:
recursive doubling (log2 p steps, + 2 when N is not a power of two) against the tree's
2 ceil(log2 N) and the ring's 2(N-1). Large messages are bandwidth-bound: ring and halving-doubling
both move the minimum 2(N-1)/N x S per rank, and the ring does it with one neighbour per step.

Measured with `python -m playground bench allreduce --algo ring,tree,hd,rd` on the 2-core
development machine (medians of 3 runs, README): below 64 KiB recursive doubling was fastest or
within noise of the tree at 2, 4 and 8 ranks (8 B at 2 ranks: rd 155 us, tree 248, ring 308); from
16 MiB up the ring was fastest at 2 and 4 ranks over ZeroMQ and within 10% of the best at 8, where
oversubscription (8 ranks on 2 cores) blurs every difference.
"""

SMALL_BYTES = 64 * 1024  # below: latency-bound


def choose_allreduce(nbytes: int, n: int) -> str:
    return "rd" if nbytes < SMALL_BYTES else "ring"
