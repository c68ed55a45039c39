"""One timeline from every rank's log: clocks aligned, each message drawn from its send to its receive.

Each rank logs raw timestamps from its own time source and, once, a `clock` event (cat "meta")
with its offset to rank 0's clock and the offset's uncertainty u (playground.tracing.clocks): the true
offset lies within u of the estimate. `align` shifts every event of a rank by its offset, so a
multi-host timeline lines up to within the ranks' uncertainties; a log without a clock event (an
older run, the simulator) is left as it is.

Within u is not always good enough: a message between two ranks on one host takes 30 us here, and
two estimates each off by 20 us (bounds of 50) can show it received before it was sent. Every
message says more about the clocks: its receive ended after its send began, so for a message from
s to d, offset_s - offset_d <= (receive end at d) - (send start at s), in raw times. `tighten` moves
the offsets, each within its own bound, until every message satisfies that, as Scalasca's
controlled logical clock does with a run's messages (Becker et al., 2009), but without ever leaving
the bound the measurement gave. The true offsets satisfy every constraint, so a consistent
alignment exists whenever the bounds hold; if none is found (clock drift in a long run), the
offsets stay as close as the iterations got and `inspect` says how many receives still come first.

Messages from one sender to one receiver on one tag are delivered in order, and the communicator
numbers them (`seq` on `send` and `recv_wait`), so the k-th send from r to s on tag t *is* the k-th
receive at s from r on tag t. `message_flows` pairs them; a send never received has no arrow.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from playground.core.errors import ScenarioError
from playground.tracing.trace import CAT_META, read_events

Key = tuple[int, int, int, int]  # (src, dst, tag, seq)


TIGHTEN_ROUNDS = 500
MARGIN_US = 0.01  # tightened slack aimed for: above the logs' 1 ns rounding
RESOLUTION_US = 0.001  # the logs' timestamps are rounded to 1 ns


@dataclass(frozen=True)
class RankClock:
    """The offset measured at rendezvous, its bound, and the offset `align` applied (within it)."""

    offset_us: float
    uncertainty_us: float
    applied_us: float | None = None

    @property
    def shift_us(self) -> float:
        return self.offset_us if self.applied_us is None else self.applied_us


@dataclass(frozen=True)
class Flow:
    """One message: its `send` event on rank src and its `recv_wait` event on rank dst."""

    src: int
    dst: int
    tag: int
    seq: int
    send: dict
    recv: dict

    @property
    def id(self) -> str:
        """A Chrome trace flow id (hex, as Perfetto parses string ids): a hash of (src, dst, tag, seq)."""
        text = f"{self.src},{self.dst},{self.tag},{self.seq}".encode()
        return "0x" + hashlib.blake2b(text, digest_size=7).hexdigest()

    @property
    def slack_us(self) -> float:
        """Time from the send's start to the receive's end: negative means the receive completed
        before the message was sent, which only misaligned clocks can show."""
        return self.recv["ts"] + self.recv["dur"] - self.send["ts"]


def clock_of(events: list[dict]) -> RankClock | None:
    """The rank's clock estimate from its `clock` event, if it logged one."""
    for e in events:
        if e.get("name") == "clock" and e.get("cat") == CAT_META:
            args = e.get("args", {})
            return RankClock(float(args.get("offset_us", 0.0)), float(args.get("uncertainty_us", 0.0)))
    return None


def align(events_by_rank: dict[int, list[dict]]) -> tuple[dict[int, list[dict]], dict[int, RankClock]]:
    """(events shifted onto rank 0's clock, each rank's clock with the offset applied); meta events
    are dropped from the timeline (they are facts about the rank, not time it spent)."""
    found = {r: c for r, events in events_by_rank.items() if (c := clock_of(events)) is not None}
    found = tighten(found, message_flows(events_by_rank))
    aligned = {}
    for rank, events in events_by_rank.items():
        shift = found[rank].shift_us if rank in found else 0.0
        aligned[rank] = [
            {**e, "ts": round(e["ts"] + shift, 3)} if shift else e for e in events if e.get("cat") != CAT_META
        ]
    return aligned, found


def tighten(clocks: dict[int, RankClock], raw_flows: list["Flow"]) -> dict[int, RankClock]:
    """The clocks with `applied_us` set: each offset moved as little as it takes, within its bound,
    for every message (in raw times) to be received after it was sent. A rank without a clock
    stays put."""
    bound = {r: (c.offset_us - c.uncertainty_us, c.offset_us + c.uncertainty_us) for r, c in clocks.items()}
    limit: dict[tuple[int, int], float] = {}  # (s, d) -> the smallest raw slack of their messages
    for f in raw_flows:
        if f.src != f.dst:
            limit[f.src, f.dst] = min(limit.get((f.src, f.dst), float("inf")), f.slack_us)
    offset = {r: c.offset_us for r, c in clocks.items()}

    def room(r: int, up: bool) -> float:
        if r not in bound:
            return 0.0
        return bound[r][1] - offset[r] if up else offset[r] - bound[r][0]

    for _ in range(TIGHTEN_ROUNDS):
        moved = False
        for (s, d), slack in limit.items():
            # > 0: the receive would show before the send (aiming a hair past exactly at it)
            deficit = offset.get(s, 0.0) - offset.get(d, 0.0) - slack + MARGIN_US
            if deficit <= MARGIN_US / 2:
                continue
            up = min(deficit / 2, room(d, True))  # share the move, each within its bound
            down = min(deficit - up, room(s, False))
            up = min(deficit - down, room(d, True))
            if up + down <= 1e-9:
                continue
            if d in offset:
                offset[d] += up
            if s in offset:
                offset[s] -= down
            moved = True
        if not moved:
            break
    return {r: RankClock(c.offset_us, c.uncertainty_us, round(offset[r], 3)) for r, c in clocks.items()}


def message_flows(events_by_rank: dict[int, list[dict]]) -> list[Flow]:
    """Every message whose send and receive are both in the logs, in send order per rank."""
    sends: dict[Key, dict] = {}
    recvs: dict[Key, dict] = {}
    for rank, events in events_by_rank.items():
        for e in events:
            args = e.get("args")
            if not args or "seq" not in args:
                continue
            if e["name"] == "send":
                sends[(rank, args["peer"], args["tag"], args["seq"])] = e
            elif e["name"] == "recv_wait":
                recvs[(args["peer"], rank, args["tag"], args["seq"])] = e
    return [Flow(*key, send, recvs[key]) for key, send in sends.items() if key in recvs]


def receives_before_send(flows: list[Flow]) -> list[Flow]:
    """Messages the (aligned) timeline shows as received before they were sent."""
    return [f for f in flows if f.slack_us < -RESOLUTION_US]


def load_timeline(run_dir: Path) -> tuple[dict[int, list[dict]], dict[int, RankClock]]:
    """(every rank's events shifted onto rank 0's clock, each rank's clock estimate)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ScenarioError(
            f"{run_dir}: no such run directory (run a scenario first: python -m playground run ring)"
        )
    logs = sorted(run_dir.glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if not logs:
        raise ScenarioError(f"{run_dir}: no rank-<r>.jsonl logs in this directory")
    return align({int(p.stem.split("-")[1]): read_events(p) for p in logs})


def merged_spans(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals (start, end), in any order and overlapping each other, as disjoint sorted ones."""
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def covered(spans: Sequence[tuple[float, float]]) -> float:
    """Total time covered by at least one of the intervals."""
    return sum(e - s for s, e in merged_spans(spans))


def intersection_s(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Total time covered by both interval sets (start, end): how long a trace shows, say, compute
    and communication running at once. Intervals within one set may overlap or be unsorted."""
    ma, mb = merged_spans(a), merged_spans(b)
    i = j = 0
    total = 0.0
    while i < len(ma) and j < len(mb):
        lo = max(ma[i][0], mb[j][0])
        hi = min(ma[i][1], mb[j][1])
        if hi > lo:
            total += hi - lo
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total
