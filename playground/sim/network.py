"""The simulated machine: links between ranks (alpha, beta), ports, and the ranks' CPUs.

The model, stated once (the README repeats it):
- Each rank has a full-duplex port per kind of link (one for links inside its node, one for
  links between nodes, as a GPU with its own NVLink and NIC). A message of n bytes holds the
  sender's outgoing port and the receiver's incoming port for n / beta, starting when both are
  free (messages on one port are served in the order they were posted), and arrives alpha after
  its last byte left: arrival = start + n / beta + alpha. Congestion and serialisation come out
  of these port queues, not out of a formula.
- A reduction of n bytes costs n / gamma of the receiving rank's CPU.
- With `cores`, the ranks share that many CPUs, as on one host, where the "network" is CPUs
  moving bytes: a reduction waits for a free CPU (first come, first served), and a message waits
  for two, the sender's copy into shared memory and the receiver's copy out, each held for the
  whole alpha + n / beta (the software and the copies that alpha and beta were fitted to, on two
  ranks with a core each, pipelined). So two ranks sending to each other at once take twice a
  one-way time on two cores, as they do on this machine, and 8 ranks on 2 cores are slow, for
  small messages as for large.
- A send completes (its buffer may be reused) when its last byte has left the port.
"""

import math
from dataclasses import dataclass

from _playground_native import SimNetwork

from playground.models.costs import Link


@dataclass(frozen=True)
class Machine:
    """Ranks in `num_nodes` nodes of `ranks_per_node` (blocks: ranks 0..k-1 on node 0, ...), the
    links inside and between nodes (their alpha and beta; the reduction rate is the machine's
    `gamma_bytes_per_s`), and the CPUs ranks share (None: one each)."""

    num_nodes: int
    ranks_per_node: int
    intra: Link
    inter: Link
    gamma_bytes_per_s: float = math.inf
    cores: int | None = None  # None: a CPU per rank

    @property
    def num_ranks(self) -> int:
        return self.num_nodes * self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node


class Network(SimNetwork):
    """Port and CPU occupancy during one simulation (the mutable part of a Machine), as the model
    above states it: `transmit(src, dst, nbytes, now)` -> (time its last byte left, arrival),
    `cpu(now, seconds)` -> when the work ends, and the bytes that crossed within and between nodes.
    Every message reserves ports, so the arithmetic is native/sim_network.c's (net_transmit, net_cpu)."""

    def __init__(self, machine: Machine):
        intra, inter = machine.intra, machine.inter
        super().__init__(
            machine.num_ranks,
            machine.ranks_per_node,
            intra.alpha_s,
            intra.beta_bytes_per_s,
            inter.alpha_s,
            inter.beta_bytes_per_s,
            machine.cores or 0,
        )
        self.machine = machine
