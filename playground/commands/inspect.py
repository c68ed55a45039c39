"""`inspect RUN_DIR`: where each rank's time went, the slowest rank, and trace/plot export.

A rank's time is split into the categories of playground.tracing.trace: send (handing messages to
ZeroMQ), wait (blocked until a message arrived), reduce (combining data) and other (the rest of
the timed operations: copies, Python, scheduling). "total" is the time inside timed operations
(cat "op") when the node records them, else the span from the first to the last event.

Every rank's events are first shifted onto rank 0's clock by the offset the rank measured at
rendezvous (playground.tracing.timeline), so the plot and the trace of a multi-host run line up; the
trace also draws every message as a flow arrow from its send to its receive, and `--diagram` draws
the messages as a Lamport diagram (playground.diagram).
A run on emulated hosts (`hosts:` in its scenario.yaml) also gets per-host totals and the bytes that
crossed host links against those that stayed inside a host, from each send event's peer and bytes
and the block placement of the ranks.
"""

import bisect
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from playground.core.topology import host_name, place_blocks, ranks_on
from playground.display.report import Table, make_console, render_table
from playground.tracing.timeline import load_timeline, message_flows, receives_before_send
from playground.tracing.trace import CAT_COMPUTE, CAT_OP, CAT_REDUCE, CAT_SEND, CAT_WAIT, to_chrome_trace


@dataclass(frozen=True)
class RankTimes:
    rank: int
    total_us: float
    send_us: float
    wait_us: float
    reduce_us: float
    compute_us: float
    bytes_sent: int
    bytes_received: int
    num_events: int

    @property
    def other_us(self) -> float:
        return max(0.0, self.total_us - self.send_us - self.wait_us - self.reduce_us - self.compute_us)

    def phases(self) -> dict[str, float]:
        return {
            "send": self.send_us,
            "receive-wait": self.wait_us,
            "reduce": self.reduce_us,
            "compute": self.compute_us,
            "other": self.other_us,
        }

    @property
    def critical_phase(self) -> str:
        return max(self.phases().items(), key=lambda kv: kv[1])[0]


def _within(events: list[dict], windows: list[tuple[float, float]]) -> list[dict]:
    """Events that start inside one of the (sorted) windows; all events when there are none."""
    if not windows:
        return events
    out, starts = [], [w[0] for w in windows]
    for e in events:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i >= 0 and e["ts"] <= windows[i][1]:
            out.append(e)
    return out


def rank_times(rank: int, events: list[dict]) -> RankTimes:
    """Where one rank's time went. Communication categories count inside the timed operations
    (cat "op") of the main thread; compute counts wherever it ran, as nodes that overlap compute
    with a communication thread record it outside any op."""
    ops = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == CAT_OP and e.get("tid", 0) == 0
    )
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) if events else 0.0
    inside = _within(events, ops) if ops else events

    def cat_sum(cat, pool):
        return sum(e["dur"] for e in pool if e.get("cat") == cat and e.get("tid", 0) == 0)

    compute = cat_sum(CAT_COMPUTE, events)
    total = sum(b - a for a, b in ops) if ops else span
    total = max(total, compute)
    sent = sum(e.get("args", {}).get("bytes", 0) for e in events if e.get("cat") == CAT_SEND)
    received = sum(e.get("args", {}).get("bytes", 0) for e in events if e.get("cat") == CAT_REDUCE)
    return RankTimes(
        rank,
        total,
        cat_sum(CAT_SEND, inside),
        cat_sum(CAT_WAIT, inside),
        cat_sum(CAT_REDUCE, inside),
        compute,
        sent,
        received,
        len(events),
    )


def host_traffic(events: dict[int, list[dict]], placement: tuple[int, ...]) -> list[dict]:
    """Per host: bytes its ranks sent to ranks on the same host, out over its link, and in over it
    (sent to it by ranks on other hosts), and their summed receive-wait, from the send events."""
    rows = [
        {
            "host": host_name(h),
            "ranks": len(ranks_on(placement, h)),
            "inside": 0,
            "out": 0,
            "in": 0,
            "wait_us": 0.0,
        }
        for h in range(max(placement) + 1)
    ]
    for rank, evs in events.items():
        if not 0 <= rank < len(placement):
            continue
        home = rows[placement[rank]]
        for e in evs:
            if e.get("cat") == CAT_WAIT and e.get("tid", 0) == 0:
                home["wait_us"] += e.get("dur", 0.0)
            if e.get("cat") != CAT_SEND:
                continue
            args = e.get("args", {})
            peer, nbytes = args.get("peer"), args.get("bytes", 0)
            if not isinstance(peer, int) or not 0 <= peer < len(placement):
                continue
            if placement[peer] == placement[rank]:
                home["inside"] += nbytes
            else:
                home["out"] += nbytes
                rows[placement[peer]]["in"] += nbytes
    return rows


def _print_hosts(run_dir: Path, events: dict[int, list[dict]], console) -> None:
    try:
        scenario = yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return
    hosts, ranks = scenario.get("hosts"), scenario.get("ranks")
    if not isinstance(hosts, int) or not isinstance(ranks, int) or not 1 <= hosts <= ranks:
        return
    rows = host_traffic(events, place_blocks(ranks, hosts))
    link = scenario.get("link") or {}
    title = f"per host ({hosts} hosts, link {link.get('rate', 'unshaped')}, delay {link.get('delay', '0')})"
    table_rows = [
        {
            "host": r["host"],
            "ranks": r["ranks"],
            "inside_MiB": r["inside"] / 2**20,
            "out_MiB": r["out"] / 2**20,
            "in_MiB": r["in"] / 2**20,
            "wait_ms": r["wait_us"] / 1e3,
        }
        for r in rows
    ]
    columns = {
        "host": "host",
        "ranks": "ranks",
        "inside_MiB": "sent inside (MiB)",
        "out_MiB": "out over link (MiB)",
        "in_MiB": "in over link (MiB)",
        "wait_ms": "recv-wait (ms)",
    }
    render_table(Table(title, table_rows, columns), console)
    crossed = sum(r["out"] for r in rows)
    inside = sum(r["inside"] for r in rows)
    share = crossed / (crossed + inside) * 100 if crossed + inside else 0.0
    console.print(
        f"bytes that crossed host links: {crossed / 2**20:.2f} MiB ({share:.0f}% of all sent); "
        f"stayed inside a host: {inside / 2**20:.2f} MiB",
        highlight=False,
    )


def load_run(run_dir: Path) -> dict[int, list[dict]]:
    """Every rank's events, shifted onto rank 0's clock."""
    return load_timeline(run_dir)[0]


def write_trace(events: dict[int, list[dict]], clocks: dict, path: Path) -> list:
    """The Chrome trace of a run's aligned events (`load_timeline`), every message a flow arrow;
    returns the flows."""
    flows = message_flows(events)
    path.write_text(json.dumps(to_chrome_trace(events, flows, clocks)))
    return flows


RANK_COLUMNS = {
    "rank": "rank",
    "total_ms": "total (ms)",
    "send_ms": "send (ms)",
    "wait_ms": "recv-wait (ms)",
    "reduce_ms": "reduce (ms)",
    "compute_ms": "compute (ms)",
    "other_ms": "other (ms)",
    "sent_MiB": "sent (MiB)",
    "received_MiB": "received (MiB)",
    "events": "events",
}


def inspect_run(
    run_dir: Path,
    trace_path: str | None = None,
    plot_path: str | None = None,
    diagram_path: str | None = None,
    diagram_options: dict | None = None,
) -> int:
    """The per-rank table, and the files asked for; the diagram is drawn first, so that a run it
    cannot draw (no message events, too many ranks) is one line and nothing else."""
    diagram = None
    if diagram_path:
        from playground.diagram import draw_diagram

        diagram = draw_diagram(Path(run_dir), Path(diagram_path), **(diagram_options or {}))
    events, clocks = load_timeline(run_dir)
    console = make_console()
    result_file = Path(run_dir) / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    _print_ranks(run_dir, events, result, console)
    _print_hosts(run_dir, events, console)
    if result.get("ok") is False:
        for line in result.get("failures", [])[:5]:
            console.print(f"[red]failure[/red]: {line}", highlight=False)
    if trace_path:
        _trace(events, clocks, Path(trace_path), console)
    if plot_path:
        from playground.display.plot import plot_timeline

        plot_timeline(events, Path(plot_path))
        console.print(f"wrote timeline plot {plot_path}", highlight=False)
    if diagram:
        console.print(diagram.summary(), highlight=False, markup=False)
        if diagram.truncated:
            console.print(f"note: {diagram.cut_note()}", highlight=False, markup=False)
    return 0


def _print_ranks(run_dir: Path, events: dict[int, list[dict]], result: dict, console) -> None:
    """Each rank's time inside timed operations, by phase (its byte counts as the rank counted
    them where result.json has them), and the slowest rank's critical phase."""
    counted = {res["rank"]: res for res in result.get("rank_results", [])}
    times = [rank_times(r, ev) for r, ev in sorted(events.items())]
    rows = [
        {
            "rank": t.rank,
            "total_ms": t.total_us / 1e3,
            "send_ms": t.send_us / 1e3,
            "wait_ms": t.wait_us / 1e3,
            "reduce_ms": t.reduce_us / 1e3,
            "compute_ms": t.compute_us / 1e3,
            "other_ms": t.other_us / 1e3,
            "sent_MiB": (counted.get(t.rank, {}).get("bytes_sent") or t.bytes_sent) / 2**20,
            "received_MiB": (counted.get(t.rank, {}).get("bytes_received") or t.bytes_received) / 2**20,
            "events": t.num_events,
        }
        for t in times
    ]
    title = f"{result.get('scenario', Path(run_dir).name)}: time per rank inside timed operations"
    render_table(Table(title, rows, RANK_COLUMNS), console)
    slowest = max(times, key=lambda t: t.total_us)
    phase = slowest.critical_phase
    share = slowest.phases()[phase] / slowest.total_us * 100 if slowest.total_us else 0.0
    console.print(
        f"slowest rank: {slowest.rank} ({slowest.total_us / 1e3:.2f} ms); its critical phase: "
        f"{phase} ({share:.0f}% of its time)",
        highlight=False,
    )


def _trace(events: dict[int, list[dict]], clocks: dict, path: Path, console) -> None:
    """The Chrome trace written, and what it says of the clocks: how far ranks were shifted, and a
    warning where a receive still ends before its send."""
    flows = write_trace(events, clocks, path)
    console.print(
        f"wrote Chrome trace {path} ({sum(len(e) for e in events.values())} events, "
        f"{len(events)} processes, {len(flows)} message arrows): open in https://ui.perfetto.dev "
        f"or chrome://tracing",
        highlight=False,
    )
    if clocks:
        worst = max(clocks.items(), key=lambda kv: abs(kv[1].offset_us))
        moved = {
            r: c.shift_us - c.offset_us for r, c in clocks.items() if abs(c.shift_us - c.offset_us) >= 0.05
        }
        console.print(
            f"clocks: each rank shifted by its offset to rank 0 (largest: rank {worst[0]}, "
            f"{worst[1].offset_us:+.1f} us +/- {worst[1].uncertainty_us:.1f} us)"
            + (
                f"; {len(moved)} moved within their bounds so that every receive follows its send "
                f"(at most {max(map(abs, moved.values())):.1f} us)"
                if moved
                else ""
            ),
            highlight=False,
        )
    early = receives_before_send(flows)
    if early:
        f = min(early, key=lambda f: f.slack_us)
        console.print(
            f"[yellow]warning[/yellow]: {len(early)} of {len(flows)} messages end before they were "
            f"sent on the merged timeline (worst: rank {f.src} -> {f.dst} tag {f.tag} #{f.seq}, "
            f"{-f.slack_us:.1f} us early): the clock offsets are off by more than that",
            highlight=False,
        )
