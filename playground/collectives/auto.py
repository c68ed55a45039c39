"""`algorithm: auto`: pick the all-reduce algorithm by message size and rank count.

Small messages are latency-bound, so the algorithm with the fewest sequential steps wins:
halving-doubling (2 log2 p steps, + 2 when N is not a power of two) or the binomial tree
(2 ceil(log2 N) steps) against the ring's 2(N-1). Large messages are bandwidth-bound, where ring
and halving-doubling both move the minimum 2(N-1)/N x S per rank and the tree moves 2 S per
level. The crossovers below were measured with `python -m playground bench allreduce --algo
ring,tree,hd` on the 2-core development machine (see README).
"""

SMALL_BYTES = 64 * 1024  # below: latency-bound


def choose_allreduce(nbytes: int, n: int) -> str:
    if n <= 2:
        return "ring"  # with two ranks all three do the same single exchange; the ring's is leanest
    if nbytes < SMALL_BYTES:
        return "rd"
    return "ring" if n & (n - 1) else "hd"
