"""What the ranks' flight rings say together: the first collective they disagree on, the ranks that
never joined one the others entered, each rank's last completed one, and the rank the others wait for.

PyTorch's flight-recorder analyzer (tools/flight_recorder) reads the dumps of every rank and matches
collectives by process group and sequence number; so does this. Matched collectives (comm/oprecord.py)
are lined up by (group, group_seq): every rank of a group numbers that group's collectives alike.
A group is the whole communicator (0) or a process group (its tag offset, the same on its ranks).
Rings keep the last K entries, so only numbers that every rank still holds are compared.

The rank "everyone waits for" follows each waiting rank's peer (the ring says whom a collective has
waited for since a whole slice) to a rank that is not waiting: the end most chains reach.
"""

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from playground.comm.flight import Ring, read_run
from playground.display.report import Table

_CALL_KEYS = ("name", "algorithm", "op", "dtype", "nbytes", "fingerprint")


@dataclass
class Disagreement:
    group: int
    group_seq: int
    calls: dict[int, dict]  # rank -> its entry


@dataclass
class NeverJoined:
    group: int
    group_seq: int
    entry: dict  # one of the entries of the ranks that entered it
    entered: list[int]
    missing: list[int]


@dataclass
class FlightAnalysis:
    rings: dict[int, Ring]
    disagreement: Disagreement | None = None
    never_joined: list[NeverJoined] = field(default_factory=list)
    waits: dict[int, tuple[int, float]] = field(default_factory=dict)  # rank -> (peer, seconds)
    blocking: int | None = None  # the rank most waits end at
    now_ns: int = 0  # the newest time in any ring: "since" counts to it

    @property
    def ok(self) -> bool:
        return self.disagreement is None and not self.never_joined and not self.waits


def describe(entry: dict | None, short: bool = False) -> str:
    """ "allreduce ring #17 (sum, float32, 32 B)": an entry as the lines below say it; `short`:
    "allreduce #17" (a table's cell)."""
    if entry is None:
        return "none"
    if entry["kind"] != "collective":
        peer = f" {'to' if entry['kind'] == 'send' else 'from'} rank {entry.get('peer', '?')}"
        return (
            f"{entry['kind']}{peer}"
            + ("" if short else f" tag {entry.get('tag', '?')}")
            + f" #{entry['seq']}"
        )
    if short:
        return f"{entry['name']} #{entry['seq']}"
    what = [x for x in (entry.get("op"), entry.get("dtype") if entry.get("nbytes") else "") if x]
    if entry.get("nbytes", -1) > 0:
        what.append(f"{entry['nbytes']} B")
    algorithm = f" {entry['algorithm']}" if entry.get("algorithm") else ""
    return f"{entry['name']}{algorithm} #{entry['seq']}" + (f" ({', '.join(what)})" if what else "")


def _matched(ring: Ring) -> dict[tuple[int, int], dict]:
    return {
        (e["group"], e["group_seq"]): e for e in ring.entries if e["kind"] == "collective" and e["group_seq"]
    }


def analyze(rings: dict[int, Ring]) -> FlightAnalysis:
    """Line the rings up; see the module's docstring."""
    out = FlightAnalysis(rings)
    times = [
        t
        for r in rings.values()
        for e in r.entries
        for t in (e["t_begin_ns"], e["t_end_ns"], e.get("t_wait_ns", 0))
    ]
    out.now_ns = max(times, default=0)
    matched = {rank: _matched(ring) for rank, ring in rings.items()}
    groups = sorted({g for calls in matched.values() for g, _ in calls})
    first_time = None
    for g in groups:
        members = (
            sorted(rings)
            if g == 0
            else sorted(r for r, calls in matched.items() if any(k[0] == g for k in calls))
        )
        seqs = {r: sorted(s for gg, s in matched[r] if gg == g) for r in members}
        low = max((s[0] for s in seqs.values() if s), default=0)  # the oldest number every ring still holds
        for k in sorted({s for ss in seqs.values() for s in ss if s >= low}):
            have = {r: matched[r][(g, k)] for r in members if (g, k) in matched[r]}
            keys = {tuple(e.get(x) for x in _CALL_KEYS) for e in have.values()}
            t = min(e["t_begin_ns"] for e in have.values())
            if len(keys) > 1 and (first_time is None or t < first_time):
                out.disagreement, first_time = Disagreement(g, k, have), t
            missing = [r for r in members if r not in have and (not seqs[r] or seqs[r][-1] < k)]
            if missing:
                entry = next(iter(have.values()))
                out.never_joined.append(NeverJoined(g, k, entry, sorted(have), missing))
                break  # the later ones follow from it
    for rank, ring in rings.items():
        current = ring.current
        if current is not None and current.get("t_wait_ns") and "peer" in current:
            until = current["t_end_ns"] or out.now_ns
            out.waits[rank] = (current["peer"], max(0.0, (until - current["t_wait_ns"]) / 1e9))
    out.blocking = _blocking(out.waits)
    return out


def _blocking(waits: dict[int, tuple[int, float]]) -> int | None:
    """The rank most chains of waits end at (one that is not waiting itself)."""
    ends: Counter[int] = Counter()
    for rank in waits:
        seen, r = {rank}, waits[rank][0]
        while r in waits and r not in seen:
            seen.add(r)
            r = waits[r][0]
        if r not in waits:
            ends[r] += 1
    return ends.most_common(1)[0][0] if ends else None


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def summary_lines(a: FlightAnalysis) -> list[str]:
    """What happened, in a few lines (the failure report's and `inspect --flight`'s)."""
    lines = []
    if a.disagreement is not None:
        d = a.disagreement
        by_call: dict[str, list[int]] = {}
        for rank, e in sorted(d.calls.items()):
            by_call.setdefault(describe(e), []).append(rank)
        sides = "; ".join(f"{_ranks(rs)}: {call}" for call, rs in by_call.items())
        lines.append(f"first disagreement{_group(d.group)}, collective {d.group_seq} of its group: {sides}")
    for n in a.never_joined:
        lines.append(
            f"{_ranks(n.missing)} never joined {describe(n.entry)}{_group(n.group)}, which {_ranks(n.entered)} entered"
        )
    if a.waits:
        for peer, waiters in _by_peer(a.waits).items():
            longest = max(a.waits[r][1] for r in waiters)
            lines.append(
                f"{_ranks(waiters)} wait{'' if len(waiters) > 1 else 's'} for rank {peer} (up to {_seconds(longest)})"
            )
    if a.blocking is not None:
        ring = a.rings.get(a.blocking)
        where = describe(ring.current) if ring is not None and ring.current else "no collective"
        last = describe(ring.last_completed) if ring is not None else "none"
        lines.append(
            f"the rank the others wait for: rank {a.blocking} (running: {where}; last completed: {last})"
        )
    return lines


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s >= 1 else f"{s * 1000:.0f} ms"


def _group(group: int) -> str:
    return "" if group == 0 else f" in group {group}"


def _by_peer(waits: dict[int, tuple[int, float]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for rank, (peer, _) in sorted(waits.items()):
        out.setdefault(peer, []).append(rank)
    return out


def rank_table(a: FlightAnalysis) -> Table:
    """A row per rank: its last completed collective, what runs now (and whom it waits for)."""
    rows = []
    for rank, ring in sorted(a.rings.items()):
        running = ring.current
        wait = a.waits.get(rank)
        rows.append(
            {
                "rank": rank,
                "records": ring.records,
                "last_completed": describe(ring.last_completed, short=True),
                "running": f"{describe(running, short=True)}, {running['state']}" if running else "",
                "waits_for": f"rank {wait[0]}, {_seconds(wait[1])}" if wait else "",
            }
        )
    return Table(
        "flight recorder: where each rank is",
        rows,
        {
            "rank": "rank",
            "records": "ops",
            "last_completed": "last completed",
            "running": "in",
            "waits_for": "waits for",
        },
    )


def last_entries_table(ring: Ring, count: int = 8) -> Table:
    """A rank's newest `count` entries, oldest first (with their group and its number when some
    ran in a process group)."""
    entries = ring.entries[-count:]
    grouped = any(e.get("group") for e in entries)
    rows = [
        {
            "record": e["record"],
            "op": describe(e),
            "state": e["state"],
            **({"group": e.get("group", ""), "group_seq": e.get("group_seq", "")} if grouped else {}),
        }
        for e in entries
    ]
    return Table(f"rank {ring.rank}: its last {len(rows)} operations", rows)


def to_dict(a: FlightAnalysis) -> dict:
    """flight.json's analysis (the rings themselves beside it)."""
    return {
        "summary": summary_lines(a),
        "disagreement": None
        if a.disagreement is None
        else {
            "group": a.disagreement.group,
            "group_seq": a.disagreement.group_seq,
            "calls": a.disagreement.calls,
        },
        "never_joined": [
            {
                "group": n.group,
                "group_seq": n.group_seq,
                "op": describe(n.entry),
                "entered": n.entered,
                "missing": n.missing,
            }
            for n in a.never_joined
        ],
        "waits": {r: {"peer": p, "seconds": round(s, 3)} for r, (p, s) in a.waits.items()},
        "blocking": a.blocking,
        "last_completed": {r: ring.last_completed for r, ring in a.rings.items()},
    }


DUMP_FILE = "flight.json"


def write_dump(run_dir: Path, reason: str) -> tuple[Path, FlightAnalysis] | None:
    """Every rank's ring and what they say together, as flight.json in `run_dir` (written whole: a
    rename); None when the run has no rings."""
    rings = read_run(run_dir)
    if not rings:
        return None
    analysis = analyze(rings)
    dump = {
        "reason": reason,
        "written_unix_s": round(time.time(), 3),
        **to_dict(analysis),
        "ranks": {rank: {**_header(ring), "entries": ring.entries} for rank, ring in sorted(rings.items())},
    }
    path = Path(run_dir) / DUMP_FILE
    tmp = path.with_name(f".{DUMP_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(dump, indent=1))
    os.replace(tmp, path)
    return path, analysis


def _header(ring: Ring) -> dict:
    return {"pid": ring.pid, "capacity": ring.capacity, "records": ring.records, "active": ring.active}
