"""The simulated machine: links between ranks (alpha, beta), ports, and the ranks' CPUs.

The model, stated once (the README repeats it):
- Each rank has a full-duplex port per kind of link (one for links inside its node, one for
  links between nodes, as a GPU with its own NVLink and NIC). A message of n bytes holds the
  sender's outgoing port and the receiver's incoming port for n / beta, starting when both are
  free (messages on one port are served in the order they were posted), and arrives alpha after
  its last byte left: arrival = start + n / beta + alpha. Congestion and serialisation come out
  of these port queues, not out of a formula.
- A reduction of n bytes costs n / gamma of the receiving rank's CPU.
- With `cores`, the ranks share that many CPUs, as processes share a machine's: CPU work waits for a
  free core (first come, first served), past a time slice a rank goes to the back of the queue when
  another waits, a core that goes on with another rank than its last pays a context switch (where
  ranks sleep while they wait, only for a rank woken from that sleep: it keeps its core until it
  blocks), and
  copies running at once share the memory's bandwidth by max-min fairness (native/sim_cpu.c;
  playground/models/contention.py).
- With a calibrated `host` (models/contention.py's HostModel, from `calibrate`), a message crosses no
  port: the sender's CPU works on it (a fixed part by size range, and a copy in unless the array was
  computed in place), it arrives its range's latency later, and the receiver's CPU works on it (a
  fixed part, and a copy out or the reduction). A rank that slept waiting and finds a core idle
  starts the host's wake-up later, a local copy of a buffer costs its bytes at the copy rate, and,
  data-free, each rank's own Python between its calls is timed and charged to it (the calibrated
  per-message CPU less what the simulator times of the communicator's own calls: sim/replay.py).
- A send completes (its buffer may be reused) when its last byte has left the port.
"""

import math
from dataclasses import dataclass

from _playground_native import SimNetwork

from playground.models.contention import HostModel
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
    host: HostModel | None = None  # a calibrated host's per-message CPU and latency (no ports then)

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

    def __init__(self, machine: Machine, time_python: bool = False):
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
        host = machine.host
        if host is not None:
            r = host.ranges
            # each side's share of the communicator's Python, which the simulator times as it runs
            timed = host.timed_python_s * host.python_scale / 2 if time_python else 0.0
            self.set_host(
                [c.from_bytes for c in r],
                [max(0.0, c.send_s - timed) for c in r],
                [c.send_s_per_byte for c in r],
                [max(0.0, c.recv_s - timed) for c in r],
                [c.recv_s_per_byte for c in r],
                [c.latency_s for c in r],
                [c.latency_s_per_byte for c in r],
                host.python_scale if time_python else 0.0,
                [c.wait_s for c in r],
            )
        if machine.cores and host is not None:
            self.set_cores(
                host.slice_s,
                host.memory_bytes_per_s,
                host.copy_demand,
                host.reduce_demand,
                host.wake_s,
                host.copy_s_per_byte,
                host.migration_cost_s,
                host.stream_window_bytes,
                host.message_copy_s_per_byte,
                host.switch_s,
            )
