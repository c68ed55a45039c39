"""What the alpha-beta model leaves out on one host: ranks that wait for a core, copies that share
the memory's bandwidth, and per-message costs that are not one alpha and one beta at every size.

A `HostModel` is a host's calibrated costs (`python -m playground calibrate`, models/calibration.py):
- per message, by size range (SMPI's piecewise-linear model, Degomme et al., IEEE TPDS 2017): the
  sender's CPU (fixed, plus a copy in per byte), the latency between the two (nothing runs), and
  the receiver's CPU (fixed, plus a copy out per byte, or the reduction at gamma);
- `cores`: the CPUs all that work shares. The simulator (playground/sim/, native/sim_cpu.c) runs it
  as a time-sharing scheduler does: first come first served, and past a time slice (`slice_s`) a
  rank goes to the back of the queue when another waits; with `migration_cost_s`, as Linux does,
  each core has its own queue and an idle core takes over another's waiting rank only once it has
  waited that long (a burst of a few microseconds stays on its busy core; a long copy moves);
- memory: copies and reductions running at once share `memory_bytes_per_s` of memory traffic by
  max-min fairness (`max_min_shares`, as SimGrid's flow model shares a link), each asking what it
  moves alone (`copy_demand`, `reduce_demand`).
The closed forms of models/costs.py give every rank its own CPU: where ranks outnumber cores they
do not apply, and the model column says so and defers to the simulator (`closed_form_applies`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError


def max_min_shares(demands: Sequence[float], capacity: float) -> list[float]:
    """What each flow gets of `capacity` when each asks `demands[i]` (max-min fair, water filling):
    in order of demand, each gets its demand if an equal share of what is left covers it, else that
    equal share. capacity <= 0 or math.inf: everyone gets their demand (no shared limit)."""
    if any(d < 0 for d in demands):
        raise UsageError(f"demands must be >= 0, got {list(demands)}", field="demands")
    if not 0 < capacity < math.inf:
        return list(map(float, demands))
    out = [0.0] * len(demands)
    left = float(capacity)
    order = sorted(range(len(demands)), key=lambda i: (demands[i], i))
    for done, i in enumerate(order):
        got = min(float(demands[i]), left / (len(order) - done))
        out[i] = got
        left -= got
    return out


@dataclass(frozen=True)
class MessageCosts:
    """One size range's costs of a message of n bytes (n >= from_bytes, below the next range's)."""

    from_bytes: int
    send_s: float
    send_s_per_byte: float
    recv_s: float
    recv_s_per_byte: float
    latency_s: float
    latency_s_per_byte: float = 0.0
    wait_s: float = 0.0  # the receiver's CPU more when it slept waiting for the message: its wake-up

    def one_way_s(self, n: float) -> float:
        """A message alone, copied in and out: what an idle ping-pong measures one way."""
        return (
            self.send_s
            + self.recv_s
            + self.latency_s
            + n * (self.send_s_per_byte + self.recv_s_per_byte + self.latency_s_per_byte)
        )


@dataclass(frozen=True)
class HostModel:
    """A host's calibrated costs for one transport (see the module's docstring)."""

    ranges: tuple[MessageCosts, ...]
    cores: int
    gamma_bytes_per_s: float
    slice_s: float = 0.0
    memory_bytes_per_s: float = 0.0  # 0: unlimited
    copy_demand: float = 0.0
    reduce_demand: float = 0.0
    wake_s: float = 0.0  # a rank that slept waiting starts this much later on an idle core
    copy_s_per_byte: float = 0.0  # a local copy of a buffer (an algorithm's working copy)
    message_copy_s_per_byte: float = 0.0  # a message's copy in or out (0: copy_s_per_byte's)
    python_scale: float = 0.0  # the simulated ranks' own Python, timed, times this (0: not charged)
    # the communicator's Python a data-free simulation times per message (sim/replay.py): measured in the
    # calibrated costs already, so a simulation that times Python takes it off each message's fixed CPU
    timed_python_s: float = 0.0
    # an algorithm's own numpy call (timed on stand-ins in a data-free simulation) costs this many times
    # its timed Python: among ranks that share the cores it finds the caches holding theirs (calibrate's
    # `numpy` pattern: comm/patterns.py)
    numpy_scale: float = 1.0
    # a core that goes on with another rank than the one it last ran pays this (the context switch and
    # the caches the other's state fills): the ping-ping's CPU per message beyond the window's; where
    # ranks sleep while they wait (wake_s > 0), only for a rank woken from that sleep
    switch_s: float = 0.0
    # > 0: a run queue per core, as Linux keeps them: a rank waits for the core it last ran on, and
    # another core that goes idle takes it over only once it has waited this long (the scheduler's
    # migration cost: until then it counts as cache-hot); 0: one queue, any free core runs any rank
    migration_cost_s: float = 0.0
    # > 0: a swap of an array from this size up (sendrecv_reduce with one peer) streams through a
    # window the caches hold, as the shm transport's does: half a copy in, a cached reduction operand
    stream_from_bytes: int = 0
    stream_window_bytes: int = 0  # what such a stream's window holds: where ranks sleep, a wake-up each

    def __post_init__(self):
        if not self.ranges or self.ranges[0].from_bytes != 0:
            raise UsageError("the first size range starts at 0 bytes", field="ranges")
        starts = [r.from_bytes for r in self.ranges]
        if starts != sorted(set(starts)):
            raise UsageError(f"size ranges must start at increasing sizes, got {starts}", field="ranges")
        if self.cores < 1:
            raise UsageError(f"must be >= 1, got {self.cores}", field="cores")

    def costs(self, n: float) -> MessageCosts:
        """The range of an n-byte message."""
        k = 0
        while k + 1 < len(self.ranges) and self.ranges[k + 1].from_bytes <= n:
            k += 1
        return self.ranges[k]

    def one_way_s(self, n: float) -> float:
        return self.costs(n).one_way_s(n)


def closed_form_applies(num_ranks: int, cores: int | None) -> bool:
    """The closed forms give every rank a CPU of its own: true only when ranks do not outnumber cores."""
    return cores is None or num_ranks <= cores
