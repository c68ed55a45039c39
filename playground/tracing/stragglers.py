"""Stragglers named: each rank scored per code section against the fastest rank and against its own
best, from the timing logs the ranks write anyway.

NVIDIA's resiliency extension (nvidia-resiliency-ext, straggler detection) times user-marked
sections on every rank and reports two scores per rank and section: *relative*, the fastest rank's
time over this rank's (1.0 for the fastest, 0.5 for a rank twice as slow), and *individual*, the
rank's own best time over its time now (it slowed down since). A rank whose relative score in a
section that matters falls below RELATIVE_THRESHOLD is named.

Sections, from the events of `rank-<r>.jsonl` (playground.tracing.trace):
- every compute span's name (cat "compute"), summed per step when the span says its step (a
  training step's forward and backward pieces), else one sample per span;
- every timed operation (cat "op": a collective of the bench, by name and size), as its *busy* time:
  its duration less the time the rank waited for messages inside it (cat "wait"). A straggler's
  peers wait for it, so their collectives last as long as its own; what differs is who was busy
  and who waited, which needs the message events (`trace_messages`, on by default in runs).

A step's compute spans are also summed into one section (COMPUTE): on a busy machine one piece of
a step may lose its CPU for a while on any rank, so the pieces are scored and shown, but only the
whole step's compute, and the operations, name a rank.

"Now" is each rank's latest half of its samples (at least MIN_SAMPLES), so a rank slowed from some
step on is named even when the start of its run was fast; "its own best" is the better of its two
halves. A half's time is the lower quartile of its samples (`typical`): noise on a busy machine only
adds time, a slowed rank is slow in every sample; an operation's samples are first averaged in four
chunks, fair to work that comes in lumps. Sections that hold under MIN_SHARE of a rank's judged time, or with fewer than MIN_SAMPLES
samples on some rank, are not judged: there noise would name ranks. A live reader can call `judge`
on the logs as ranks flush them; the launcher calls it once at the end of a run.
"""

import bisect
import itertools
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

RELATIVE_THRESHOLD = 0.6  # named: the fastest rank's time is under 0.6 of this rank's (it is 1.67x slower)
COMPUTE = "compute (a step's spans)"  # the section summing every compute span of a step
MIN_SAMPLES = 3
CHUNKS = 4  # an operation's samples are averaged in this many chunks first (`typical`)
MIN_SHARE = 0.05  # a section under 5% of a rank's judged time is not judged
MIN_SECTION_S = 20e-6  # nor one whose samples last under 20 us (timer and scheduling noise)


@dataclass(frozen=True)
class Score:
    section: str
    rank: int
    samples: int
    now_s: float  # the median of its latest window
    relative: float  # the fastest rank's now_s over this rank's
    individual: float  # its best window's median over its now_s


@dataclass
class Stragglers:
    named: list[int]  # the ranks named, slowest first
    scores: list[Score] = field(default_factory=list)  # every judged (section, rank)
    sections: list[str] = field(default_factory=list)
    not_judged: str = ""  # why nothing was judged, when so

    naming: list[str] = field(default_factory=list)  # the sections that may name a rank

    def worst(self, rank: int) -> Score | None:
        """The rank's lowest relative score over the sections that name ranks."""
        mine = [s for s in self.scores if s.rank == rank and s.section in self.naming]
        return min(mine, key=lambda s: s.relative) if mine else None

    def note(self) -> str:
        """One line for a run's report."""
        if self.not_judged:
            return f"stragglers: not judged ({self.not_judged})"
        if not self.sections:
            return "stragglers: none judged (no section with enough samples on every rank)"
        if not self.named:
            n = len(self.naming)
            return (
                f"stragglers: none (every rank at least {RELATIVE_THRESHOLD:g} of the fastest rank's speed "
                f"in {'the' if n == 1 else 'all'} {n} section{'' if n == 1 else 's'} judged)"
            )
        parts = [
            f"rank {s.rank} ({s.section}: {s.relative:.2f} of the fastest rank's speed, {s.individual:.2f} of its own best)"
            for s in map(self.worst, self.named)
            if s is not None
        ]
        return "stragglers: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {
            "named": self.named,
            "threshold": RELATIVE_THRESHOLD,
            **({"not_judged": self.not_judged} if self.not_judged else {}),
            "sections": self.sections,
            "ranks": {
                s.rank: {
                    "section": s.section,
                    "relative": round(s.relative, 3),
                    "individual": round(s.individual, 3),
                }
                for s in (self.worst(r) for r in sorted({x.rank for x in self.scores}))
                if s is not None
            },
            "scores": [
                {
                    "section": s.section,
                    "rank": s.rank,
                    "samples": s.samples,
                    "now_us": round(s.now_s * 1e6, 1),
                    "relative": round(s.relative, 3),
                    "individual": round(s.individual, 3),
                }
                for s in self.scores
            ],
        }


def op_sections(events_by_rank: dict[int, list[dict]]) -> set[str]:
    """The sections that are timed operations (cat "op")."""
    return {_op_name(e) for events in events_by_rank.values() for e in events if e.get("cat") == "op"}


def _op_name(e: dict) -> str:
    args = e.get("args") or {}
    return e["name"] + (f" {args['bytes']} B" if "bytes" in args else "")


def section_samples(events_by_rank: dict[int, list[dict]]) -> dict[str, dict[int, list[float]]]:
    """section -> rank -> its samples in seconds, in the order they happened."""
    out: dict[str, dict[int, list[float]]] = defaultdict(dict)
    for rank, events in events_by_rank.items():
        per_step: dict[str, dict] = defaultdict(dict)
        waits: dict[int, tuple[list[float], list[float]]] = {}
        for e in events:
            if e.get("cat") == "wait":
                starts, ends = waits.setdefault(e.get("tid", 0), ([], []))
                starts.append(e["ts"])
                ends.append(e["ts"] + e["dur"])
        for e in events:
            cat, args = e.get("cat"), e.get("args") or {}
            if cat == "compute":
                step = args.get("step")
                if step is None:
                    out[e["name"]].setdefault(rank, []).append(e["dur"] / 1e6)
                else:
                    steps = per_step[e["name"]]
                    steps[step] = steps.get(step, 0.0) + e["dur"] / 1e6
            elif cat == "op":
                name = _op_name(e)
                waited = _waited(waits.get(e.get("tid", 0)), e["ts"], e["ts"] + e["dur"])
                out[name].setdefault(rank, []).append(max(0.0, e["dur"] - waited) / 1e6)
        for name, steps in per_step.items():
            out[name][rank] = [steps[k] for k in sorted(steps)]
        if len(per_step) > 1:  # all of a step's compute: where a straggler shows above the noise
            every = sorted(set().union(*per_step.values()))
            out[COMPUTE].setdefault(rank, []).extend(
                sum(p.get(k, 0.0) for p in per_step.values()) for k in every
            )
    return out


def _waited(waits: tuple[list[float], list[float]] | None, t0: float, t1: float) -> float:
    """Microseconds of wait events (sorted by start) that lie inside [t0, t1]."""
    if not waits:
        return 0.0
    starts, ends = waits
    total, i = 0.0, bisect.bisect_left(starts, t0)
    while i < len(starts) and starts[i] <= t1:
        total += min(ends[i], t1) - starts[i]
        i += 1
    return total


def typical(samples: list[float], lumpy: bool = False) -> float:
    """A window's typical time: the lower quartile of its samples. A busy machine only ever adds
    time (a preempted step, a late wake-up), so the faster samples say best what the rank's work
    costs, while a slowed rank is slow in every one. For `lumpy` work (operations, which may pay
    for their work every few of them: a sleep, a garbage collection) the samples are first cut into
    CHUNKS consecutive chunks and each replaced by its mean, which counts the lumps."""
    if lumpy and len(samples) >= CHUNKS:
        bounds = [round(i * len(samples) / CHUNKS) for i in range(CHUNKS + 1)]
        samples = [statistics.fmean(samples[a:b]) for a, b in itertools.pairwise(bounds)]
    if len(samples) < 2:
        return samples[0]
    return statistics.quantiles(samples, n=4, method="inclusive")[0]


def score_section(section: str, samples: dict[int, list[float]], lumpy: bool = False) -> list[Score]:
    """Each rank's relative and individual score in one section: "now" is its latest half (at least
    MIN_SAMPLES), its best the better of its two halves."""
    now, best = {}, {}
    for r, v in samples.items():
        half = max(MIN_SAMPLES, len(v) // 2)
        now[r] = typical(v[-half:], lumpy)
        best[r] = min(now[r], typical(v[:-half], lumpy)) if len(v) - half >= MIN_SAMPLES else now[r]
    fastest = min(now.values())
    return [
        Score(
            section,
            r,
            len(samples[r]),
            now[r],
            fastest / now[r] if now[r] > 0 else 1.0,
            best[r] / now[r] if now[r] > 0 else 1.0,
        )
        for r in sorted(samples)
    ]


def _step_spans(events_by_rank: dict[int, list[dict]]) -> set[str]:
    """The compute spans that say their step: parts of COMPUTE, scored but not naming by themselves
    (each piece alone is short enough for noise to make a straggler of its rank)."""
    return {
        e["name"]
        for events in events_by_rank.values()
        for e in events
        if e.get("cat") == "compute" and "step" in (e.get("args") or {})
    }


def judge(events_by_rank: dict[int, list[dict]], cpus: int | None = None) -> Stragglers:
    """Score every section every rank has enough samples of, and name the stragglers. With more
    ranks than `cpus` (the CPUs they share) nothing is judged: each rank then waits for a CPU in
    turn, a straggler for a while, and the scores would name them all."""
    ranks = sorted(events_by_rank)
    if len(ranks) < 2:
        return Stragglers([])
    if cpus is not None and len(ranks) > cpus:
        return Stragglers([], not_judged=f"{len(ranks)} ranks share {cpus} CPUs: each is a straggler in turn")
    by_section = section_samples(events_by_rank)
    ops = op_sections(events_by_rank)
    totals: dict[int, float] = defaultdict(float)
    for per_rank in by_section.values():
        for r, v in per_rank.items():
            totals[r] += sum(v)
    scores: list[Score] = []
    sections = []
    for section, per_rank in sorted(by_section.items()):
        if set(per_rank) != set(ranks) or min(len(v) for v in per_rank.values()) < MIN_SAMPLES:
            continue
        if all(sum(v) < MIN_SHARE * totals[r] for r, v in per_rank.items()):
            continue
        if max(statistics.median(v) for v in per_rank.values()) < MIN_SECTION_S:
            continue
        sections.append(section)
        scores += score_section(section, per_rank, lumpy=section in ops)
    parts = _step_spans(events_by_rank) if COMPUTE in sections else set()
    naming = [s for s in sections if s not in parts]
    lowest: dict[int, float] = {}
    for s in scores:
        if s.section in naming and s.relative < RELATIVE_THRESHOLD:
            lowest[s.rank] = min(s.relative, lowest.get(s.rank, 1.0))
    return Stragglers(sorted(lowest, key=lowest.__getitem__), scores, sections, naming=naming)


# A log line holding one of these is an event `judge` reads (a cheap test before parsing it).
JUDGED = ('"cat": "compute"', '"cat": "op"', '"cat": "wait"')


def read_judged_events(run_dir: Path) -> dict[int, list[dict]]:
    """Each rank's events that `judge` reads (compute, op, wait), from its log; a torn line is skipped."""
    out: dict[int, list[dict]] = {}
    for path in sorted(Path(run_dir).glob("rank-*.jsonl")):
        try:
            rank = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        events = []
        with open(path) as f:
            for line in f:
                if any(c in line for c in JUDGED):
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        out[rank] = events
    return out
