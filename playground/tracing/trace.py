"""Per-rank event log: buffered in memory while timing, written as JSON lines outside it.

One event a line: {"ts": us, "dur": us, "name", "cat", "rank", "tid", "args"}; `ts` is the rank's
own time source, raw (CLOCK_MONOTONIC). The rank's `clock` event (cat "meta") holds its offset to
rank 0's clock, estimated at rendezvous (playground.tracing.clocks); `inspect` shifts each rank's events by it
(playground.tracing.timeline) and pairs the k-th `send` from r to s on a tag with the k-th `recv_wait` at s
from r on that tag (their `seq`) to draw the message as a flow arrow. Each event maps onto a Chrome
trace "X" event (pid = rank, tid = thread).
"""

import functools
import json
import threading
import time
from pathlib import Path

from _playground_native import Span, null_span, set_span_mark

# Categories that `inspect` splits a rank's time into.
CAT_SEND = "send"  # handing a message to the transport
CAT_WAIT = "wait"  # blocked until a message arrived
CAT_REDUCE = "reduce"  # combining received data
CAT_COMPUTE = "compute"  # a node's own work
CAT_OP = "op"  # one whole timed operation (an all-reduce, a request, ...)
CAT_PHASE = "phase"  # a phase inside an operation (reduce-scatter, all-gather)
CAT_META = "meta"  # facts about the rank, not timing (its clock offset): left out of time accounting
# seq: the message's number among those from its sender to its receiver on its tag (0, 1, ...).
ARG_NAMES = {
    "send": ("peer", "tag", "bytes", "seq"),
    "recv_wait": ("peer", "tag", "seq"),
    "reduce": ("peer", "bytes"),
}
_get_ident = threading.get_ident


def now_us() -> float:
    return time.monotonic_ns() / 1000.0


class Tracer:
    """Collects events in a list; `flush()` appends them to rank-<r>.jsonl.

    `span(name, cat=CAT_COMPUTE, **args)`: `with tracer.span(...)` records the time the body takes
    as one event (nothing when disabled). It is native/span.c's Span bound to this tracer (or its
    shared do-nothing span): a phase of a small all-reduce costs no Python frame.

    `messages` is a slot: the communicator's C path reads it at an offset on every message
    (native/getset_cache.h); a node may still switch it off after the tracer is made."""

    __slots__ = ("messages", "__dict__", "__weakref__")

    def __init__(
        self,
        rank: int,
        path: Path | None,
        enabled: bool = True,
        clock_offset_us: float = 0.0,
        clock_ns=time.monotonic_ns,
        messages: bool = True,
    ):
        self.rank = rank
        self.path = path
        self.enabled = enabled
        self.messages = enabled and messages  # also one event per message sent, waited for, reduced
        self.clock_offset_us = clock_offset_us
        self.clock_ns = clock_ns  # the rank's time source: CLOCK_MONOTONIC, or a simulation's virtual clock
        self._events: list[tuple] = []
        self._lock = threading.Lock()
        self._tids: dict[int, int] = {}
        self.span = functools.partial(Span, self) if enabled else null_span

    def add(self, name: str, cat: str, start_us: float, dur_us: float, args: dict | None = None) -> None:
        if self.enabled:
            self._events.append((start_us, dur_us, name, cat, _get_ident(), args))

    def add_ns(self, name: str, cat: str, t0_ns: int, t1_ns: int, *args) -> None:
        """The hot-path form used per message: raw ns and positional args, turned into a dict at
        flush (`ARG_NAMES[name]` names them), so logging costs a tuple, not a dict, per message."""
        self._events.append((t0_ns, t1_ns, name, cat, _get_ident(), args, None))

    def now_us(self) -> float:
        """This rank's clock, in microseconds (what `add` takes)."""
        return self.clock_ns() / 1000.0

    def flush(self) -> None:
        """Write buffered events; call outside timed regions (between iterations, at the end)."""
        if self.path is None:
            self._events.clear()
            return
        with self._lock:
            events, self._events = self._events, []
            if not events:
                return
            tids = self._tids
            main = threading.main_thread().ident
            lines = []
            for event in events:
                if len(event) == 7:  # add_ns form, or a span's (raw ns and its args dict)
                    t0, t1, name, cat, ident, values, kind = event
                    ts, dur = t0 / 1000.0, (t1 - t0) / 1000.0
                    if kind is _SPAN:
                        args = values
                    else:
                        args = dict(zip(ARG_NAMES.get(name, ()), values, strict=False))
                else:
                    ts, dur, name, cat, ident, args = event
                tid = 0 if ident == main else tids.setdefault(ident, len(tids) + 1)
                ev = {
                    "ts": round(ts + self.clock_offset_us, 3),
                    "dur": round(dur, 3),
                    "name": name,
                    "cat": cat,
                    "rank": self.rank,
                    "tid": tid,
                }
                if args:
                    ev["args"] = args
                lines.append(json.dumps(ev))
            with open(self.path, "a") as f:
                f.write("\n".join(lines) + "\n")


_SPAN = object()  # marks a span's event: its args are a dict, turned into JSON as they are
set_span_mark(_SPAN)


def read_events(path: Path) -> list[dict]:
    """Events of one rank log; a torn last line (rank killed mid-write) is skipped."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def to_chrome_trace(events_by_rank: dict[int, list[dict]], flows=(), clocks=None) -> dict:
    """Chrome trace JSON (Perfetto, chrome://tracing): one process per rank, "X" events.

    `flows` (playground.tracing.timeline.Flow) become flow arrows in the trace format's v2 form: the send's
    slice gets `bind_id` and `flow_out`, the receive's the same `bind_id` and `flow_in`. `clocks`
    (rank -> RankClock) label each process with the offset its events were shifted by."""
    bound = {}
    for flow in flows:
        bound[id(flow.send)] = (flow.id, "flow_out")
        bound[id(flow.recv)] = (flow.id, "flow_in")
    trace = []
    for rank, events in sorted(events_by_rank.items()):
        trace.append(
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}}
        )
        trace.append(
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        )
        clock = (clocks or {}).get(rank)
        if clock is not None:
            label = f"clock {clock.offset_us:+.1f} us (+/- {clock.uncertainty_us:.1f} us) to rank 0"
            if abs(clock.shift_us - clock.offset_us) >= 0.05:
                label += f", shifted by {clock.shift_us:+.1f} us to keep receives after sends"
            trace.append(
                {"ph": "M", "name": "process_labels", "pid": rank, "tid": 0, "args": {"labels": label}}
            )
        for tid in sorted({e.get("tid", 0) for e in events}):
            label = "main" if tid == 0 else f"thread {tid}"
            trace.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}})
        for e in events:
            x = {
                "ph": "X",
                "name": e["name"],
                "cat": e.get("cat", ""),
                "ts": e["ts"],
                "dur": e["dur"],
                "pid": rank,
                "tid": e.get("tid", 0),
                "args": e.get("args", {}),
            }
            flow = bound.get(id(e))
            if flow is not None:
                x["bind_id"], x[flow[1]] = flow[0], True
            trace.append(x)
    return {"traceEvents": trace, "displayTimeUnit": "ms"}
