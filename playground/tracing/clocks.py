"""Each rank's clock offset to the coordinator's clock, measured at rendezvous (Cristian / NTP).

A probe leaves at t0 (on the prober's clock), the other side stamps it with its own time
t_remote, and the answer is back at t1. If both directions took equally long, the remote clock
read t_remote at the local instant (t0 + t1) / 2, so

    remote - local = t_remote - (t0 + t1) / 2

Whatever the split between the two directions, the truth lies within rtt / 2 of that estimate
(rtt = t1 - t0, the other side's own time included): that half round trip is the *uncertainty*.
Queueing and scheduling only ever lengthen a round trip, so the sample with the smallest rtt has
both the tightest bound and the least asymmetry: keep it, as NTP's clock filter does. Frequency
drift (5-30 us/s between hosts) is not corrected; runs here last seconds.

The coordinator probes (`ProbeRound`), once every rank has registered and is idle waiting for the
table, one rank at a time: round trips of ranks probing all at once compete for the CPU and the
coordinator's loop, which here made the best of 12 round trips 130-380 us instead of about 60, and
the estimates asymmetric by up to 80 us. Each rank receives its estimate with the table and logs it.
The coordinator runs on rank 0's host (in rank 0's process under another launcher), so its clock
is rank 0's host clock. On one host, even across network namespaces, every rank shares one
CLOCK_MONOTONIC and the true offset is 0: the estimate's error is then at most its uncertainty.

For drills, `PLAYGROUND_CLOCK_SKEW_US="RANK=US[,RANK=US...]"` makes those ranks' time source run
US microseconds ahead (negative: behind): their raw timestamps are wrong, and only the estimated
offset repairs them (`python -m playground inspect --trace`).
"""

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from playground.core.errors import ScenarioError, UsageError

NUM_PROBES = 12  # round trips per rank at rendezvous
PROBE_TIMEOUT_S = 2.0  # a probe unanswered this long: that rank's estimate uses what it has
SKEW_ENV = "PLAYGROUND_CLOCK_SKEW_US"


@dataclass(frozen=True)
class ClockSample:
    """One probe: sent at `t0_us`, stamped `remote_us` by the reference clock, back at `t1_us`."""

    t0_us: float
    remote_us: float
    t1_us: float

    @property
    def rtt_us(self) -> float:
        return self.t1_us - self.t0_us

    @property
    def offset_us(self) -> float:
        return self.remote_us - (self.t0_us + self.t1_us) / 2


@dataclass(frozen=True)
class ClockEstimate:
    """`offset_us` added to a rank's times gives the coordinator's, to within `uncertainty_us`."""

    offset_us: float
    uncertainty_us: float  # half the smallest round trip: |true offset - offset_us| <= this
    rtt_us: float
    samples: int

    def to_args(self) -> dict:
        """The `clock` event's args in a rank's log."""
        return {
            "offset_us": round(self.offset_us, 3),
            "uncertainty_us": round(self.uncertainty_us, 3),
            "rtt_us": round(self.rtt_us, 3),
            "samples": self.samples,
        }


def estimate(samples: Iterable[ClockSample]) -> ClockEstimate:
    """The offset of the minimum-RTT sample, with half its RTT as the bound."""
    samples = list(samples)
    if not samples:
        raise UsageError("no clock samples")
    best = min(samples, key=lambda s: s.rtt_us)
    if best.rtt_us < 0:
        raise UsageError(f"a clock sample came back before it left (rtt {best.rtt_us:.3f} us)")
    return ClockEstimate(best.offset_us, best.rtt_us / 2, best.rtt_us, len(samples))


class ProbeRound:
    """The coordinator's side: `num_probes` round trips to each rank, one rank at a time.

    `next_probe()` says whom to probe now (and stamps t0), `answer()` takes the rank's time and the
    arrival time, `overdue()` gives up on a rank that does not answer; once `done`, `estimates()`
    holds each rank's offset to the coordinator's clock (what the rank adds to its own times)."""

    def __init__(self, ranks, num_probes: int = NUM_PROBES, clock_ns: Callable[[], int] = time.monotonic_ns):
        self.queue = list(ranks)
        self.num_probes, self.clock_ns = num_probes, clock_ns
        self.samples: dict[int, list[ClockSample]] = {r: [] for r in self.queue}
        self.pending: tuple[int, int, float] | None = None  # (rank, seq, t0_us) of the probe in flight
        self.seq = 0

    @property
    def done(self) -> bool:
        return not self.queue

    def next_probe(self) -> tuple[int, int] | None:
        """(rank, seq) of the next probe to send, t0 stamped now; None when every rank is done."""
        while self.queue and len(self.samples[self.queue[0]]) >= self.num_probes:
            self.queue.pop(0)
        if not self.queue:
            self.pending = None
            return None
        self.seq += 1
        self.pending = (self.queue[0], self.seq, self.clock_ns() / 1000.0)
        return self.queue[0], self.seq

    def answer(self, rank: int, seq: int, remote_us: float, arrived_ns: int) -> bool:
        """Record the answer to the probe in flight; False (ignored) for any other answer."""
        if self.pending is None or self.pending[:2] != (rank, seq):
            return False
        self.samples[rank].append(ClockSample(self.pending[2], remote_us, arrived_ns / 1000.0))
        self.pending = None
        return True

    def overdue(self, now_ns: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
        """Give up on the rank probed now if its probe has been out for `timeout_s` (True)."""
        if self.pending is None or now_ns / 1000.0 - self.pending[2] < timeout_s * 1e6:
            return False
        self.queue.pop(0)
        self.pending = None
        return True

    def estimates(self) -> dict[int, ClockEstimate]:
        """Each probed rank's offset to the coordinator (the negated rank-minus-coordinator estimate)."""
        out = {}
        for rank, samples in self.samples.items():
            if samples:
                e = estimate(samples)
                out[rank] = ClockEstimate(-e.offset_us, e.uncertainty_us, e.rtt_us, e.samples)
        return out


def skew_us(rank: int, environ=None) -> float:
    """This rank's injected skew from PLAYGROUND_CLOCK_SKEW_US (0 when it names other ranks or is unset)."""
    text = (os.environ if environ is None else environ).get(SKEW_ENV, "").strip()
    if not text:
        return 0.0
    skews = {}
    for item in text.split(","):
        r, sep, us = item.partition("=")
        try:
            skews[int(r)] = float(us)
        except ValueError:
            sep = ""
        if not sep:
            raise ScenarioError(
                f"{SKEW_ENV}: expected RANK=MICROSECONDS[,RANK=MICROSECONDS...], got {text!r}"
            )
    return skews.get(rank, 0.0)


def rank_clock_ns(rank: int, environ=None) -> Callable[[], int]:
    """This rank's time source: CLOCK_MONOTONIC, shifted by its injected skew if it has one."""
    skew_ns = round(skew_us(rank, environ) * 1000)
    if not skew_ns:
        return time.monotonic_ns
    monotonic_ns = time.monotonic_ns
    return lambda: monotonic_ns() + skew_ns
