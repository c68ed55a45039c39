"""The message diagram's layout: a run's events -> lanes, arrows, bands and bars, without drawing.

One vertical lane per rank, time running down; every message an arrow from its send to its
receive (playground.tracing.timeline.message_flows pairs them), labelled with its tag and size; each
collective call (an `op` event, the same call on every rank) a band across the lanes, and its
phases (`phase` events) bars along each rank's lane. `layout` turns a run's aligned events into
lanes, arrows, bands and bars in y units of the chosen time axis; diagram/svg.py draws them.

The time axis:
- `logical` (the default): Lamport's clocks (1978). A rank's events are taken in their order on
  that rank; a send is one tick after the rank's previous event, a receive one tick after both
  the rank's previous event and the message's send. Every arrow points down whatever the clocks
  said, and events that do not wait on each other share a row, so the steps of an algorithm come
  out as rows: a ring all-reduce on N ranks is 2(N-1) rows of N parallel arrows, a binomial tree
  2 log2 N rows of fewer. This is what such diagrams usually show (Lamport's paper, Maelstrom's
  messages.svg), and the only axis on which a 14-step ring stays readable: in real time its
  sub-millisecond hand-offs are a few pixels tall beside a start-up wait of milliseconds.
- `real`: the aligned clocks (rank 0's, timeline.align): a send at its start, a receive when
  its wait ended. Honest about which waits were long; a message within one host takes tens of us,
  so arrows of one step lie nearly flat.

A message is drawn from the point its send started to the point its receive's wait ended: two
instants certain to come in that order, whatever happened between them (timeline.Flow.slack_us,
which the clocks are aligned to respect). "The first N
messages" are the first N by send start on the aligned timeline; the layout of those N is
computed on its own, so a cut diagram is the diagram of a shorter run.
"""

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from playground.core.sizes import format_size
from playground.diagram.tags import message_label
from playground.tracing.timeline import Flow, message_flows
from playground.tracing.trace import CAT_OP, CAT_PHASE

TimeAxis = Literal["logical", "real"]
TIME_AXES = ("logical", "real")
MAX_MESSAGES = 300  # arrows that stay readable: about 75 rows of a ring at 8 ranks
ALL_OPS = "all"  # `ops`: every timed operation's messages


@dataclass(frozen=True)
class Arrow:
    """One message, from (lane of src, y0) to (lane of dst, y1)."""

    src: int
    dst: int
    y0: float
    y1: float
    tag: int
    seq: int
    nbytes: int
    label: str


@dataclass(frozen=True)
class Band:
    """One collective call across every lane: the span from its first event to its last."""

    y0: float
    y1: float
    name: str  # "allreduce"
    detail: str  # "ring 1 KiB"


@dataclass(frozen=True)
class Bar:
    """One phase of a call on one rank's lane (ring.reduce_scatter, tree.broadcast, ...)."""

    rank: int
    y0: float
    y1: float
    name: str


@dataclass(frozen=True)
class Layout:
    """The diagram in the time axis' units (`logical`: Lamport ticks; `real`: us after the first
    event drawn). `rows` is the Lamport depth of the drawn messages in either axis, which is what
    the drawing sizes its height by; `depth` the longest chain of messages (each received before
    the next is sent): the number of steps the algorithm took."""

    ranks: tuple[int, ...]
    arrows: tuple[Arrow, ...]
    bands: tuple[Band, ...]
    bars: tuple[Bar, ...]
    time: TimeAxis
    y_max: float
    rows: int
    depth: int
    num_messages: int  # in the run (of the chosen ops); more than len(arrows) when cut


@dataclass(frozen=True)
class Call:
    """One timed operation: the k-th `op` event of a name on every rank that logged it."""

    name: str
    index: int
    args: dict
    windows: dict[int, tuple[float, float]]  # rank -> (start, end) on the aligned clock

    def matches(self, ops: str) -> bool:
        return ops in (ALL_OPS, self.name, self.args.get("algorithm"))


def calls(events_by_rank: dict[int, list[dict]]) -> list[Call]:
    """The run's timed operations, in order of their start on the first rank that has them.
    Collectives are called in the same order on every rank, so the k-th `allreduce` op of each
    rank is one call."""
    found: dict[tuple[str, int], Call] = {}
    for rank, events in sorted(events_by_rank.items()):
        ops = sorted((e for e in events if e.get("cat") == CAT_OP), key=lambda e: e["ts"])
        count: dict[str, int] = defaultdict(int)
        for e in ops:
            key = (e["name"], count[e["name"]])
            count[e["name"]] += 1
            call = found.setdefault(key, Call(e["name"], key[1], e.get("args", {}), {}))
            call.windows[rank] = (e["ts"], e["ts"] + e["dur"])
    return sorted(found.values(), key=lambda c: min(w[0] for w in c.windows.values()))


def inside_calls(flows: list[Flow], chosen: list[Call]) -> list[Flow]:
    """The messages sent and received inside the chosen calls (each end inside its rank's window):
    the barriers between timed calls are left out."""
    windows: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for call in chosen:
        for rank, w in call.windows.items():
            windows[rank].append(w)
    for spans in windows.values():
        spans.sort()
    starts = {r: [a for a, _ in spans] for r, spans in windows.items()}

    def within(rank: int, t: float) -> bool:
        i = bisect.bisect_right(starts.get(rank, []), t) - 1
        return i >= 0 and t <= windows[rank][i][1]

    return [f for f in flows if within(f.src, _send_time(f)) and within(f.dst, _recv_time(f))]


def _send_time(f: Flow) -> float:
    return f.send["ts"]


def _recv_time(f: Flow) -> float:
    """When the receive's wait ended, to the logs' 1 ns: a send that starts at that very instant
    (the simulator's virtual time has such ties) must not sort before it by a rounding error."""
    return round(f.recv["ts"] + f.recv["dur"], 3)


def lamport_ticks(flows: list[Flow]) -> tuple[list[int], list[int], list[int]]:
    """(send tick, receive tick, chain length at the receive) of every flow.

    A receive waits until its send has a tick; a rank whose next event is such a receive waits
    for the others. Real logs cannot deadlock here (each rank's events are in their true order on
    its own clock, and a send starts before its receive ends); a cycle in broken logs is cut at
    its earliest receive, which then precedes its send."""
    points: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # rank -> (time, kind, flow)
    recv_kind, send_kind = 0, 1  # at equal times the receive first: a send follows the wait it needed
    for i, f in enumerate(flows):
        points[f.src].append((_send_time(f), send_kind, i))
        points[f.dst].append((_recv_time(f), recv_kind, i))
    for pts in points.values():
        pts.sort()
    n = len(flows)
    send_tick, recv_tick, chain = [0] * n, [0] * n, [0] * n
    sent = [False] * n
    send_chain = [0] * n
    pos = dict.fromkeys(points, 0)
    clock = dict.fromkeys(points, 0)
    hops = dict.fromkeys(points, 0)  # the longest chain of messages ending at the rank's last event
    left = 2 * n
    while left:
        moved = False
        for rank, pts in points.items():
            while pos[rank] < len(pts):
                _, kind, i = pts[pos[rank]]
                if kind == send_kind:
                    clock[rank] += 1
                    send_tick[i], send_chain[i], sent[i] = clock[rank], hops[rank], True
                elif sent[i]:
                    clock[rank] = max(clock[rank], send_tick[i]) + 1
                    hops[rank] = max(hops[rank], send_chain[i] + 1)
                    recv_tick[i], chain[i] = clock[rank], hops[rank]
                else:
                    break
                pos[rank] += 1
                left -= 1
                moved = True
        if not moved:  # a cycle: take the earliest waiting receive as if its send came first
            rank = min((r for r in points if pos[r] < len(points[r])), key=lambda r: points[r][pos[r]][0])
            _, _, i = points[rank][pos[rank]]
            clock[rank] += 1
            hops[rank] += 1
            recv_tick[i], chain[i] = clock[rank], hops[rank]
            pos[rank] += 1
            left -= 1
    return send_tick, recv_tick, chain


class _Extent:
    """Where a window [lo, hi] of a rank lies: in logical time from its first to its last event
    drawn (half a tick around them), in real time the window, cut to what is drawn."""

    def __init__(self, points: dict[int, list[tuple[float, float]]], logical: bool, t0: float, t_end: float):
        self.points, self.logical, self.t0, self.t_end = points, logical, t0, t_end

    def __call__(self, rank: int, lo: float, hi: float) -> tuple[float, float] | None:
        if self.logical:
            inside = [y for t, y in self.points[rank] if lo <= t <= hi]
            return (min(inside) - 0.5, max(inside) + 0.5) if inside else None
        lo, hi = max(lo, self.t0), min(hi, self.t_end)
        return (lo - self.t0, hi - self.t0) if lo < hi else None


def _bands(chosen: list[Call], extent: _Extent) -> list[Band]:
    """A band across the lanes for each timed operation, over what its ranks drew inside it."""
    bands = []
    for call in chosen:
        spans = [s for rank, (lo, hi) in call.windows.items() if (s := extent(rank, lo, hi))]
        if spans:
            y0, y1 = min(s[0] for s in spans), max(s[1] for s in spans)
            bands.append(Band(y0, y1, call.name, call_detail(call.args)))
    return bands


def _bars(
    events_by_rank: dict[int, list[dict]], chosen: list, ops: str | None, extent: _Extent
) -> list["Bar"]:
    """A bar on its rank's lane for each phase span drawn (with `ops`, only inside the operations)."""
    windows = [(rank, w) for c in chosen for rank, w in c.windows.items()]
    bars = []
    for rank, events in sorted(events_by_rank.items()):
        for e in events:
            lo, hi = e["ts"], e["ts"] + e["dur"]
            if e.get("cat") != CAT_PHASE or (s := extent(rank, lo, hi)) is None:
                continue
            if ops is None or any(r == rank and a <= lo <= b for r, (a, b) in windows):
                bars.append(Bar(rank, *s, e["name"]))
    return bars


def call_detail(args: dict) -> str:
    """'ring 1 KiB' from an op event's args (what the collective node and the simulator record)."""
    parts = [str(args["algorithm"])] if args.get("algorithm") else []
    if isinstance(args.get("bytes"), int):
        parts.append(format_size(args["bytes"]))
    return " ".join(parts)


def layout(
    events_by_rank: dict[int, list[dict]],
    time: TimeAxis = "logical",
    max_messages: int = MAX_MESSAGES,
    ops: str | None = None,
) -> Layout:
    """The diagram of aligned events (timeline.align): every message, or with `ops` only those
    inside timed operations (`all`, or those of one name or algorithm, e.g. `ring`); the first
    `max_messages` of them by send time."""
    flows = message_flows(events_by_rank)
    all_calls = calls(events_by_rank)
    chosen = [c for c in all_calls if ops is None or c.matches(ops)]
    if ops is not None:
        flows = inside_calls(flows, chosen)
    flows.sort(key=lambda f: (_send_time(f), f.src, f.dst, f.tag, f.seq))
    drawn = flows[:max_messages]
    send_tick, recv_tick, chain = lamport_ticks(drawn)
    logical = time == "logical"
    times = [t for f in drawn for t in (_send_time(f), _recv_time(f))]
    t0 = min(times, default=0.0)
    t_end = max(times, default=0.0)
    points: dict[int, list[tuple[float, float]]] = defaultdict(list)  # rank -> (time, y)
    arrows = []
    for f, s, r in zip(drawn, send_tick, recv_tick, strict=True):
        y0, y1 = (s, r) if logical else (_send_time(f) - t0, _recv_time(f) - t0)
        points[f.src].append((_send_time(f), y0))
        points[f.dst].append((_recv_time(f), y1))
        nbytes = int(f.send.get("args", {}).get("bytes", 0))
        arrows.append(Arrow(f.src, f.dst, y0, y1, f.tag, f.seq, nbytes, message_label(f.tag, nbytes)))
    for pts in points.values():
        pts.sort()
    extent = _Extent(points, logical, t0, t_end)
    bands = _bands(chosen, extent) if drawn else []
    bars = _bars(events_by_rank, chosen, ops, extent) if drawn else []
    rows = max(recv_tick, default=0)
    y_max = float(rows) if logical else t_end - t0
    return Layout(
        tuple(sorted(events_by_rank)),
        tuple(arrows),
        tuple(bands),
        tuple(bars),
        time,
        y_max,
        rows,
        max(chain, default=0),
        len(flows),
    )
