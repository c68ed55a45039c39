"""What the ranks' step records and trace logs say, per mode: pure functions, tested on synthetic
records.

A step ends when its slowest rank ends it, so each step is read from the rank whose step took
longest; a mode's figure is the median over its timed steps (all but the first, which pays for
first touches of memory and, in DDP, for building the buckets). The loss is the global batch's
(the sum of the ranks' shares), the same on every rank.

Overlap from the trace: for every rank and timed step, the time during which some collective of
the step was running (`bucket.allreduce`, ZeRO-2 and -3's `unit.allgather` and `unit.reduce_scatter`,
on whichever thread) and the model was computing (`forward.*` and `backward.*` spans on the main
thread), over the time some collective was running: the share of the communication hidden under
compute (DDP's all-reduces can only hide under backward; ZeRO-3's gathers under forward too). The same definition is applied to DDP's records
(`ddp_stats`), where the all-reduces are timed by a communication hook. Both are kept step by step
(`traced_step_overlaps`, `ddp_step_overlaps`), so a range of steps has its own overlap
(`overlap_over`): the report's windows of steps each show theirs.
"""

import statistics
from collections.abc import Iterable, Iterator
from pathlib import Path

from playground.tracing.timeline import covered, intersection_s
from playground.tracing.trace import read_events

PHASES = (
    "step_s",
    "forward_s",
    "backward_s",
    "comm_s",
    "optimizer_s",
    "check_s",
    "allreduce_s",
    "compute_cpu_s",
    "waited_s",
)
WARMUP_STEPS = 1
COMM_SPANS = ("bucket.allreduce", "unit.allgather", "unit.reduce_scatter")  # a step's collectives
COMPUTE_SPANS = ("forward.", "backward.")  # the model's pieces, on the main thread


def timed_steps(num_steps: int) -> range:
    """The steps a mode's figures are medians over: all but the first, unless there is only one."""
    return range(WARMUP_STEPS if num_steps > WARMUP_STEPS else 0, num_steps)


def slowest_steps(per_rank: list[list[dict]]) -> list[dict]:
    """Step by step, the record of the rank whose step took longest."""
    return [max(records, key=lambda r: r["step_s"]) for records in zip(*per_rank, strict=True)]


def phase_medians(steps: list[dict]) -> dict[str, float]:
    """The median of every phase over the timed steps."""
    timed = [steps[i] for i in timed_steps(len(steps))]
    return {p: statistics.median(s[p] for s in timed) for p in PHASES if p in timed[0]}


def mode_stats(results: list[dict], k: int, global_tokens: int) -> dict:
    """Mode number `k` of every rank's result -> its medians, tokens/s and loss curve."""
    per_rank = [res["modes"][k]["steps"] for res in results]
    slowest = slowest_steps(per_rank)
    med = phase_medians(slowest)
    losses = [s["loss"] for s in per_rank[0]]
    one_clock = len({res["modes"][k].get("host") for res in results}) == 1
    return {
        "mode": results[0]["modes"][k]["mode"],
        **med,
        "skew_s": backward_skew_s(per_rank) if one_clock else None,
        "tokens_per_s": global_tokens / med["step_s"] if med["step_s"] > 0 else float("nan"),
        **rank_medians(per_rank, one_clock),
        "losses": losses,
        # each rank's parameters after the last step, hashed: a restarted run's against a fault-free one's
        "hashes": [res["modes"][k].get("hash") for res in results],
        **span(per_rank[0]),
        "buckets": results[0]["modes"][k]["buckets"],
        "memory": [res["modes"][k]["memory"] for res in results],
        "sent_bytes": [res["modes"][k]["steps"][-1].get("sent_bytes", 0) for res in results],
    }


def span(steps: list[dict]) -> dict[str, float]:
    """A rank's steps on its clock: `wall_s` from the first step's start to the last one's end,
    restarts included (a resumed run's first steps come from its checkpoint), and `period_s`, the
    median time from one step's start to the next's (the step with its checks: what a step costs)."""
    if not steps or "step_start" not in steps[0]:
        return {}
    starts = [s["step_start"] for s in steps]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return {
        "wall_s": steps[-1]["step_start"] + steps[-1]["step_s"] - starts[0],
        "period_s": statistics.median(gaps) if gaps else steps[0]["step_s"],
    }


def rank_medians(per_rank: list[list[dict]], one_clock: bool = True) -> dict[str, float]:
    """A rank's own figures, the median over every rank's timed steps: `compute_cpu_s` (the CPU
    time of forward, backward and the optimizer: the work, whatever waited for a core), the wall
    times of forward, backward and the optimizer; and the step's critical path up to the
    collectives: `last_compute_s`, from the first rank's start of the step to the last rank's end of
    backward (with `one_clock`, ranks on one host: a rank that waited for a core to start is late
    there too; else the longest forward + backward), `after_last_s` what the slowest step took
    beyond it and the optimizer."""
    timed = [records[i] for records in per_rank for i in timed_steps(len(records))]
    if "compute_cpu_s" not in timed[0]:
        return {}
    steps = timed_steps(len(per_rank[0]))
    if one_clock:
        last = [
            max(r[i]["backward_end"] for r in per_rank) - min(r[i]["step_start"] for r in per_rank)
            for i in steps
        ]
    else:
        last = [max(r[i]["forward_s"] + r[i]["backward_s"] for r in per_rank) for i in steps]
    after = [
        max(r[i]["step_s"] for r in per_rank) - last[k] - max(r[i]["optimizer_s"] for r in per_rank)
        for k, i in enumerate(steps)
    ]
    return {
        "last_compute_s": statistics.median(last),
        "after_last_s": statistics.median(after),
        "compute_cpu_s": statistics.median(s["compute_cpu_s"] for s in timed),
        "rank_forward_s": statistics.median(s["forward_s"] for s in timed),
        "rank_backward_s": statistics.median(s["backward_s"] for s in timed),
        "rank_optimizer_s": statistics.median(s["optimizer_s"] for s in timed),
    }


def backward_skew_s(per_rank: list[list[dict]]) -> float:
    """The median over the timed steps of how far apart the ranks ended backward (one host, one
    clock): the first collective after it waits for the last rank, so this is exposed too."""
    ends = list(zip(*([s["backward_end"] for s in records] for records in per_rank), strict=True))
    return statistics.median(max(e) - min(e) for e in (ends[i] for i in timed_steps(len(ends))))


def step_overlap(backward: list[tuple[float, float]], comm: list[tuple[float, float]]) -> tuple[float, float]:
    """(hidden, communicating): time both ran, time some communication ran."""
    return intersection_s(backward, comm), covered(comm)


def overlap_pct(hidden_s: float, comm_s: float) -> float:
    return 100.0 * hidden_s / comm_s if comm_s > 0 else 0.0


# step -> [hidden_s, comm_s, ranks]: summed over the ranks that traced the step
StepOverlaps = dict[int, list]


def overlap_over(per_step: StepOverlaps, steps: Iterable[int] | None = None) -> dict:
    """{"hidden_s", "comm_s" (per step and rank), "overlap_pct"} over `steps` (None: all of them)."""
    picked = [per_step[s] for s in (per_step if steps is None else steps) if s in per_step]
    hidden, comm, n = (sum(x[i] for x in picked) for i in range(3))
    return {
        "hidden_s": hidden / n if n else 0.0,
        "comm_s": comm / n if n else 0.0,
        "overlap_pct": overlap_pct(hidden, comm),
    }


def _add(per_step: StepOverlaps, step: int, hidden_s: float, comm_s: float) -> None:
    total = per_step.setdefault(step, [0.0, 0.0, 0])
    total[0] += hidden_s
    total[1] += comm_s
    total[2] += 1


def timed_events(run_dir: Path, num_ranks: int, num_steps: int) -> Iterator[tuple[int, dict]]:
    """(rank, event) of every traced event of a mode's timed step, rank by rank, from the logs."""
    timed = set(timed_steps(num_steps))
    for r in range(num_ranks):
        path = Path(run_dir) / f"rank-{r}.jsonl"
        if path.exists():
            for e in read_events(path):
                a = e.get("args") or {}
                if a.get("mode") is not None and a.get("step") in timed:
                    yield r, e


def is_compute(event: dict) -> bool:
    """One of the model's pieces, on the main thread."""
    return event["name"].startswith(COMPUTE_SPANS) and event.get("tid", 0) == 0


def traced_step_overlaps(run_dir: Path, num_ranks: int, num_steps: int) -> dict[str, StepOverlaps]:
    """mode -> each timed step's hidden and communicating seconds, summed over the ranks, read from
    the ranks' logs."""
    spans: dict[tuple, dict[str, list]] = {}
    for r, e in timed_events(run_dir, num_ranks, num_steps):
        kind = "backward" if is_compute(e) else "comm" if e["name"] in COMM_SPANS else None
        if kind:
            a = e["args"]
            spans.setdefault((a["mode"], r, a["step"]), {"backward": [], "comm": []})[kind].append(
                (e["ts"], e["ts"] + e["dur"])
            )
    per_mode: dict[str, StepOverlaps] = {}
    for (mode, _, step), s in sorted(spans.items()):
        hidden, comm = step_overlap(s["backward"], s["comm"])
        _add(per_mode.setdefault(mode, {}), step, hidden / 1e6, comm / 1e6)
    return per_mode


def piece_times(run_dir: Path, num_ranks: int, num_steps: int, micro_batches: int = 1) -> dict[str, dict]:
    """mode -> {piece: seconds}: each of the model's pieces (`forward.h.3`, ...) on the main thread,
    one pass's, the median over the ranks' timed steps (what the unit modes' model replays)."""
    sums: dict[tuple, float] = {}
    for r, e in timed_events(run_dir, num_ranks, num_steps):
        if is_compute(e):
            key = (e["args"]["mode"], e["name"], r, e["args"]["step"])
            sums[key] = sums.get(key, 0.0) + e["dur"] / 1e6 / micro_batches
    per: dict[str, dict[str, list[float]]] = {}
    for (mode, piece, _, _), seconds in sums.items():
        per.setdefault(mode, {}).setdefault(piece, []).append(seconds)
    return {mode: {p: statistics.median(v) for p, v in pieces.items()} for mode, pieces in per.items()}


def gather_delays(run_dir: Path, num_ranks: int, num_steps: int) -> dict[str, float]:
    """mode -> what a gather the main thread waited for cost it beyond the gather's own time, per
    gather: the wait for the last rank to start it (a peer behind by its own jitter) and, after it
    ended, the hand-back (its check on the communication thread, the main thread woken); the mean
    over every such wait of the ranks' timed steps (what the unit modes' model adds to a wait: a
    step pays a sum of them, and a few wake-ups a whole time slice late are part of what it pays)."""
    compute: dict[tuple, list[tuple[float, float]]] = {}
    gathers: dict[tuple, list[tuple[float, float]]] = {}
    for r, e in timed_events(run_dir, num_ranks, num_steps):
        key = (e["args"]["mode"], e["args"]["step"], r)
        if is_compute(e):
            compute.setdefault(key, []).append((e["ts"], e["ts"] + e["dur"]))
        elif e["name"] == "unit.allgather":
            gathers.setdefault(key, []).append((e["ts"], e["ts"] + e["dur"]))
    per: dict[str, list[float]] = {}  # mode -> every wait's delay
    for (mode, step, r), ops in gathers.items():
        peers = [sorted(gathers.get((mode, step, p), [])) for p in range(num_ranks)]
        if any(len(p) != len(ops) for p in peers):
            continue  # a rank's trace ended early: no matching
        pieces = sorted(compute.get((mode, step, r), []))
        waited: dict[float, tuple[float, float]] = {}  # a piece's start -> (end, lag) of its gather
        for i, (start, end) in enumerate(sorted(ops)):
            later = [s for s, _ in pieces if s >= end]
            if later and not any(s < end < e for s, e in pieces):  # the main thread was waiting
                lag = max(p[i][0] for p in peers) - start
                waited[later[0]] = max(waited.get(later[0], (0.0, 0.0)), (end, lag))  # the last to end
        per.setdefault(mode, []).extend((resumed - end + lag) / 1e6 for resumed, (end, lag) in waited.items())
    return {mode: statistics.fmean(v) for mode, v in per.items() if v}


def ddp_step_overlaps(per_rank: list[list[dict]]) -> StepOverlaps:
    """DDP's records -> each timed step's hidden and communicating seconds, summed over the ranks:
    the hook's all-reduce spans against backward's compute span."""
    per_step: StepOverlaps = {}
    for records in per_rank:
        for i in timed_steps(len(records)):
            h, c = step_overlap(
                [tuple(records[i]["backward_span"])], [tuple(s) for s in records[i]["allreduce_spans"]]
            )
            _add(per_step, i, h, c)
    return per_step


def ddp_stats(per_rank: list[list[dict]], global_tokens: int) -> dict:
    """PyTorch DDP's per-step records (the worker's) -> the same figures as ours, plus its overlap
    from the hook's all-reduce spans and backward's compute span."""
    slowest = slowest_steps(per_rank)
    med = phase_medians(slowest)
    overlap = overlap_over(ddp_step_overlaps(per_rank))
    losses = [statistics.fmean(records[i]["loss"] for records in per_rank) for i in range(len(slowest))]
    return {
        "mode": "torch DDP",
        **med,
        "tokens_per_s": global_tokens / med["step_s"] if med["step_s"] > 0 else float("nan"),
        "losses": losses,
        "hidden_s": overlap["hidden_s"],
        "comm_traced_s": overlap["comm_s"],
        "overlap_pct": overlap["overlap_pct"],
        "buckets": per_rank[0][-1].get("bucket_bytes", []),
    }


def relative_gaps(ours: list[float], theirs: list[float]) -> list[float]:
    """|ours - theirs| / |theirs|, step by step."""
    return [abs(a - b) / abs(b) if b else abs(a - b) for a, b in zip(ours, theirs, strict=False)]
