"""Folded simulation (opt-in, `simulate --fold`): one rank runs for all when all share one timeline.

When every pair of ranks is joined by the same kind of link and nothing is shared (no `--cores`),
an algorithm whose pattern is unchanged by a relabelling of the ranks that can take any rank to any
other gives every rank the same virtual timeline:
- the ring (all-reduce, reduce-scatter, all-gather) under rotations r -> r + c (mod N), when
  every rank's chunk has the same length (the count a multiple of N; always for all-gather);
- recursive doubling and halving-doubling under XOR translations r -> r ^ c, when N is a power
  of two (for hd also the count a multiple of N, so that every half is the same length);
- the pairwise and Bruck all-to-alls and the send/recv ring under rotations: at each step rank r
  sends to r + k and receives from r - k. (Not the scattered all-to-all: its ports' queues delay
  rank r's blocks by 2r, so every rank's timeline is its own.)
Rank 0 then runs alone, the algorithm's own code through the ordinary Communicator. A message it
sends to rank d reserves its own out-port and, standing for d's in-port (in the same state, by
the symmetry), its own in-port, and comes back to rank 0 as the message rank 0's image sends it:
from -d under rotations, from d under XOR, with the same tag, bytes and times (native/sim_transport.c,
post). Two ranks' messages never claim one port at the same instant (the ring's ports each serve one
neighbour; under XOR a rank's next partner sends only after the previous step's message arrived),
so how the exact mode breaks ties between ranks cannot tell the two apart. A ring all-reduce costs
2(N-1) messages instead of 2N(N-1).

It is exact, not an estimate: tests/test_sim.py checks every folded time against the exact
simulation's, rank by rank. Anything else (tree, hier, a topology, shared cores, data, uneven
chunks) runs in the exact mode, and the table's mode column says which ran how.
"""

from playground.sim.network import Machine

ROTATION, XOR = 1, 2  # SimEngine's `fold`


def symmetry(machine: Machine, collective: str, algorithm: str, count: int, data: bool) -> int:
    """The engine's fold for this point: ROTATION, XOR, or 0 when the ranks' timelines may differ."""
    n = machine.num_ranks
    one_link = machine.num_nodes == 1 or machine.ranks_per_node == 1
    if data or n == 1 or machine.cores is not None or not one_link:
        return 0
    if (collective, algorithm) in (("alltoall", "pairwise"), ("alltoall", "bruck"), ("sendrecv", "ring")):
        return ROTATION
    if algorithm == "ring" and (collective == "allgather" or count % n == 0):
        return ROTATION if collective in ("allreduce", "reduce_scatter", "allgather") else 0
    power_of_two = n & (n - 1) == 0
    if (
        collective == "allreduce"
        and power_of_two
        and (algorithm == "rd" or (algorithm == "hd" and count % n == 0))
    ):
        return XOR
    return 0
