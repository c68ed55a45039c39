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

import heapq
import math
from dataclasses import dataclass

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


class Network:
    """Port and CPU occupancy during one simulation (the mutable part of a Machine)."""

    def __init__(self, machine: Machine):
        self.machine = machine
        n = machine.num_ranks
        self._per_node = machine.ranks_per_node
        self._links = (machine.intra, machine.inter)
        self._out = ([0.0] * n, [0.0] * n)  # per link kind: when each rank's outgoing port is free
        self._in = ([0.0] * n, [0.0] * n)
        self._cores = [0.0] * machine.cores if machine.cores else None
        self.bytes_between_nodes = 0
        self.bytes_within_nodes = 0

    def transmit(self, src: int, dst: int, nbytes: int, now: float) -> tuple[float, float]:
        """Reserve the ports for a message posted at `now`: (time its last byte left, arrival)."""
        kind = 0 if src // self._per_node == dst // self._per_node else 1
        link = self._links[kind]
        out, inn = self._out[kind], self._in[kind]
        start = max(now, out[src], inn[dst])
        busy = nbytes / link.beta_bytes_per_s
        if self._cores is not None:
            start, busy = self._copy_on_cores(start, link.alpha_s, busy)
        done = start + busy
        out[src] = inn[dst] = done
        if kind:
            self.bytes_between_nodes += nbytes
        else:
            self.bytes_within_nodes += nbytes
        return done, done + link.alpha_s

    def _copy_on_cores(self, start: float, alpha: float, busy: float) -> tuple[float, float]:
        """(start, time on the port) of a message whose copies hold CPUs: the sender's copy in and
        the receiver's copy out, pipelined, each alpha + busy long on a core of its own (how the
        pingpong that fitted alpha and beta ran), or one after the other on a single core."""
        cores = self._cores
        if len(cores) == 1:
            start = max(start, cores[0])
            cores[0] = start + 2 * (alpha + busy)
            return start, alpha + 2 * busy
        heapq.heappop(cores)  # the two cores that free up first; the later one sets the start
        start = max(start, heapq.heappop(cores))
        end = start + alpha + busy
        heapq.heappush(cores, end)
        heapq.heappush(cores, end)
        return start, busy

    def cpu(self, now: float, seconds: float) -> float:
        """When work of `seconds` started at `now` on a rank ends (waiting for a free core)."""
        if self._cores is None:
            return now + seconds
        start = max(now, self._cores[0])
        end = start + seconds
        heapq.heapreplace(self._cores, end)
        return end
