"""The pipeline's figures from what the ranks did: the bubble measured from the trace, the
activations held against their formulas, the step-time model beside the measurement.

Bubble (from the trace): for each step of each replica, the stages' `pipeline.forward` and
`pipeline.backward` spans (on one clock: `tracing.timeline.load_timeline`) give the step's
makespan, from the first forward's start to the last backward's end over its stages, and each
stage's busy time, the sum of its spans; the rest of the makespan the stage was idle (waiting for
an activation or a gradient, or handing one to the transport). The bubble is the idle share of
stages x makespan, 1 - sum(busy) / (p x makespan), the quantity (p - 1) / (m + p - 1) predicts for
equal stages and free messages. Each figure is the median over the timed steps (the first step
of a run warms up and is left out when there are more) and over the replicas.

The model of each run (`steptime_model`): its schedule in simulated time from the calibrated
compute and the link, and the same schedule with equal stages and free messages (`ideal`), which
must give the formula.

Activations (exact, not timed): each stage counts the bytes of the activations it holds as it keeps
and drops them; the peak must be the schedule's peak count (GPipe: m; 1F1B: min(p - s, m)) times
one micro-batch's bytes (`plan.StagePlan.activation_bytes`).
"""

import statistics
from collections import defaultdict
from pathlib import Path

from playground.comm.group import GridShape
from playground.models.pipeline import bubble_fraction
from playground.tracing.timeline import load_timeline, message_flows
from playground.training.pipeline.schedules import SCHEDULES
from playground.training.pipeline.stage import SPAN
from playground.training.pipeline.steptime_model import predict, simulate
from playground.training.training_stats import timed_steps

SPAN_NAMES = set(SPAN.values())


def load_events(run_dir: Path) -> dict[int, list[dict]]:
    """Every rank's trace, on rank 0's clock."""
    return load_timeline(run_dir)[0]


def traced_actions(
    events: dict[int, list[dict]], shape: GridShape
) -> dict[tuple[int, int, int], dict[int, list[tuple]]]:
    """(run, step, replica) -> stage -> [(kind "F"/"B", micro-batch, start_s, end_s), ...] from the
    ranks' logs."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for rank, evs in events.items():
        data_index, stage, _ = shape.coords(rank)
        for e in evs:
            if e.get("name") not in SPAN_NAMES:
                continue
            a = e["args"]
            kind = "F" if e["name"] == SPAN["F"] else "B"
            start = e["ts"] / 1e6
            out[(a["run"], a["step"], data_index)][stage].append(
                (kind, a["mb"], start, start + e["dur"] / 1e6)
            )
    return {k: {s: sorted(v, key=lambda x: x[2]) for s, v in stages.items()} for k, stages in out.items()}


def waiting_hops_s(events: dict[int, list[dict]], tags: tuple[int, int]) -> list[float]:
    """For each activation or gradient (a message on a tag in [tags[0], tags[1])) whose receiver was
    already waiting when it was sent: the time from the send's start to the end of the wait, the
    message's delivery with the receiver's wake-up included."""
    return [
        (f.recv["ts"] + f.recv["dur"] - f.send["ts"]) / 1e6
        for f in message_flows(events)
        if tags[0] <= f.tag < tags[1] and f.recv["ts"] <= f.send["ts"]
    ]


def step_bubble(stages: dict[int, list[tuple]], num_stages: int) -> dict:
    """{"makespan_s", "busy_s" per stage, "idle_s" per stage, "bubble"} of one step of one replica."""
    spans = [x for actions in stages.values() for x in actions]
    start, end = min(x[2] for x in spans), max(x[3] for x in spans)
    makespan = end - start
    busy = [sum(x[3] - x[2] for x in stages.get(s, [])) for s in range(num_stages)]
    return {
        "makespan_s": makespan,
        "busy_s": busy,
        "idle_s": [makespan - b for b in busy],
        "bubble": 1 - sum(busy) / (num_stages * makespan) if makespan > 0 else 0.0,
    }


def run_bubbles(traced: dict, run: int, steps: int, num_stages: int, replicas: int) -> dict | None:
    """The median bubble, makespan and busy times of `run` over its timed steps and the replicas."""
    found = [
        step_bubble(traced[(run, step, d)], num_stages)
        for step in timed_steps(steps)
        for d in range(replicas)
        if (run, step, d) in traced
    ]
    if not found:
        return None
    return {
        "bubble": statistics.median(f["bubble"] for f in found),
        "makespan_s": statistics.median(f["makespan_s"] for f in found),
        "busy_s": [statistics.median(f["busy_s"][s] for f in found) for s in range(num_stages)],
        "idle_s": [statistics.median(f["idle_s"][s] for f in found) for s in range(num_stages)],
    }


def held(results: list[dict], run: int, num_stages: int) -> list[dict]:
    """Per stage: the most bytes and micro-batches of activations held in any step of `run` (over
    the replicas), and what the formulas say: the schedule's peak count x one micro-batch's bytes."""
    out = []
    for s in range(num_stages):
        ranks = [r for r in results if r["stage"] == s]
        record = ranks[0]["runs"][run]
        schedule, m = SCHEDULES[record["schedule"]], record["micro_batches"]
        per_micro_batch = ranks[0]["activation_bytes"][str(m)]
        count = schedule.peak(num_stages, s, m)
        steps = [x for r in ranks for x in r["runs"][run]["steps"]]
        out.append(
            {
                "stage": s,
                "bytes": max(x["peak_bytes"] for x in steps),
                "micro_batches": max(x["peak_micro_batches"] for x in steps),
                "formula_bytes": count * per_micro_batch,
                "formula_micro_batches": count,
            }
        )
    return out


def step_medians(results: list[dict], run: int, keys: tuple[str, ...]) -> dict[str, float]:
    """Per key, the median over the timed steps of the slowest rank's value (a step ends with its
    slowest rank)."""
    steps = len(results[0]["runs"][run]["steps"])
    return {
        k: statistics.median(max(r["runs"][run]["steps"][i][k] for r in results) for i in timed_steps(steps))
        for k in keys
    }


def losses(results: list[dict], run: int, num_stages: int) -> list[float]:
    """The global batch's loss of every step of `run`: the last stage's, replica 0's."""
    last = next(r for r in results if r["stage"] == num_stages - 1 and r["data_index"] == 0)
    return [s["loss"] for s in last["runs"][run]["steps"]]


def run_figures(
    results: list[dict],
    k: int,
    steps: int,
    shape: GridShape,
    traced: dict,
    link,
    cores: float,
    row_bytes: int,
) -> dict:
    """Run `k`'s figures: its bubble (measured, modelled, the formula's, the ideal schedule's), its
    makespan measured and modelled (with each action's modelled span, for the drawing), the
    activations held per stage and their formulas, and the gaps to one process. `row_bytes`: one
    sequence's activation (context x d_model x itemsize)."""
    record, p = results[0]["runs"][k], shape.pipeline
    schedule, m = SCHEDULES[record["schedule"]], record["micro_batches"]
    built = schedule.build(p, m)
    message = record["rows"] // m * row_bytes
    model = predict(built, results[0]["calibration"][str(m)], message, link, cores / shape.data)
    measured = run_bubbles(traced, k, steps, p, shape.data)
    gaps = [r["runs"][k]["reference"] for r in results if "reference" in r["runs"][k]]
    return {
        "schedule": schedule.name,
        "m": m,
        "bubble": measured["bubble"] if measured else None,
        "model_bubble": model.bubble,
        "formula_bubble": bubble_fraction(p, m),
        "ideal_bubble": simulate(built, [1.0] * p, [2.0] * p).bubble,
        "makespan_s": measured["makespan_s"] if measured else None,
        "idle_s": measured["idle_s"] if measured else None,
        "model_makespan_s": model.makespan_s,
        "model_spans": {s: [(a.kind, a.micro_batch, *model.spans[a]) for a in built[s]] for s in range(p)},
        "held": held(results, k, p),
        "param_gap": max((g["param_gap"] for g in gaps), default=None),
        "loss_gap": max((g["loss_gap"] for g in gaps if g["loss_gap"] is not None), default=None),
        "bitwise": bool(gaps) and all(g["bitwise"] for g in gaps),
        "phases_s": step_medians(results, k, ("pipeline_s", "tied_s", "comm_s", "optimizer_s", "step_s")),
        "losses": losses(results, k, p),
    }
