"""The readers of the lecture's §3, concurrency: who sees what, the GIL, waiting, interleavings, the
lost update, overlapping compute with communication, DDP's buckets, and (beyond the lecture) the
goodput of training that survives a rank killed at random."""

import math
import statistics

from playground.commands.recovery_results import figures as recovery_figures
from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row
from playground.models import recovery as recovery_model

READERS = Readers()


@READERS.add("who-sees")
def _who_sees(ctx: Context) -> Reading:
    rows = ctx.table("concurrency", 0)
    return Reading(
        [
            find_row(rows, "writer", writer="thread")["main_sees"],
            find_row(rows, "writer", writer="child process")["main_sees"],
        ]
    )


@READERS.add("gil")
def _gil(ctx: Context) -> Reading:
    rows = ctx.result("concurrency")["gil"]
    threads = next(r for r in rows if r["how"].endswith("threads"))
    procs = next(r for r in rows if r["how"].endswith("processes"))
    return Reading([threads["speedup"], procs["speedup"]], [threads["model_speedup"], procs["model_speedup"]])


@READERS.add("waits")
def _waits(ctx: Context) -> Reading:
    rows = ctx.result("concurrency")["waits"]
    return Reading([r["time_s"] for r in rows], [r["model_s"] for r in rows])


@READERS.add("interleavings")
def _interleavings(ctx: Context) -> Reading:
    cases = ctx.result("race")["interleavings"]
    case = next((c for c in cases if "x 2 increment" in c["case"]), None)
    if case is None:
        raise NotMeasured("race ran no 2 x 2 interleaving case")
    finals = dict(part.split(": ") for part in case["final_values"].split(", "))
    steps = 2 * 3  # two increments of read, add, write per thread
    return Reading([case["orders"], *(int(finals[f"x={x}"]) for x in (2, 3, 4))], math.comb(2 * steps, steps))


@READERS.add("lost-update")
def _lost_update(ctx: Context) -> Reading:
    no_lock = find_row(ctx.table("race", 0), "race variant", variant="no lock")
    params = ctx.run("race").params
    return Reading(
        no_lock["lost"],
        values={
            "expected": no_lock["expected"],
            "lost_pct": no_lock["lost_pct"],
            "num_procs": params.get("num_procs", "?"),
            "increments": params.get("increments", "?"),
        },
    )


@READERS.add("lock-atomic")
def _lock_atomic(ctx: Context) -> Reading:
    rows = ctx.table("race", 0)
    lock = find_row(rows, "race variant", variant="lock")
    atomic = next((r for r in rows if r["variant"].startswith("atomic")), None)
    if atomic is None:
        raise NotMeasured("race ran no atomic variant")
    return Reading([lock["lost"], atomic["lost"]])


@READERS.add("overlap-hidden")
def _overlap_hidden(ctx: Context) -> Reading:
    rows = ctx.table("overlap", 0)
    serial = find_row(rows, "overlap", setting="compute-bound", mode="serial")
    over = find_row(rows, "overlap", setting="compute-bound", mode="overlap")
    model_hidden = 100 * (serial["model_ms"] - over["model_ms"]) / serial["comm_ms"]
    return Reading(
        over["efficiency_pct"], model_hidden, values={"step_ratio": over["step_ms"] / serial["step_ms"]}
    )


TRAIN = "train-modes"  # the scenario that compares the modes (`train` trains one, for long)


def _train_rows(ctx: Context) -> tuple[dict, dict]:
    """The train-modes run's step and model tables, by mode."""
    steps = {r["mode"]: r for r in ctx.table(TRAIN, 0)}
    model = {r["mode"]: r for r in ctx.table(TRAIN, 3)}
    return steps, model


@READERS.add("train-overlap")
def _train_overlap(ctx: Context) -> Reading:
    result = ctx.result(TRAIN)
    steps, model = _train_rows(ctx)
    if "bucketed" not in steps or "bucketed" not in result.get("overlap", {}):
        raise NotMeasured(f"{TRAIN} ran no bucketed mode")
    bucketed, comm_ms = steps["bucketed"], model["bucketed"]["comm_model_ms"]
    hidden_model = 100 * min(bucketed["backward_ms"], comm_ms) / comm_ms if comm_ms > 0 else 0.0
    serial = steps.get("after_backward")
    mode = next(m for m in result["modes"] if m["mode"] == "bucketed")
    return Reading(
        result["overlap"]["bucketed"]["overlap_pct"],
        hidden_model,
        values={
            "buckets": len(mode["buckets"]),
            "ranks": result["ranks"],
            "skew_ms": bucketed.get("skew_ms") or 0.0,
            "step_ratio": bucketed["step_ms"] / serial["step_ms"] if serial else float("nan"),
        },
    )


@READERS.add("train-buckets")
def _train_buckets(ctx: Context) -> Reading:
    result = ctx.result(TRAIN)
    steps, model = _train_rows(ctx)
    if not {"per_tensor", "bucketed"} <= set(steps):
        raise NotMeasured(f"{TRAIN} ran per_tensor and bucketed, not both")
    buckets = {m["mode"]: len(m["buckets"]) for m in result["modes"]}
    n = result["ranks"]
    return Reading(
        [steps["per_tensor"]["allreduce_ms"], steps["bucketed"]["allreduce_ms"]],
        [model["per_tensor"]["comm_model_ms"], model["bucketed"]["comm_model_ms"]],
        values={
            "tensors": buckets["per_tensor"],
            "buckets": buckets["bucketed"],
            "ranks": n,
            "msgs": 2 * (n - 1),
        },
    )


# The same drill (mtbf and seed) twice: checkpoints every few steps, and about Young/Daly's interval.
GOODPUT = ("train-recovery-often", "train-recovery")


def _drill_run(ctx: Context, key: str) -> dict:
    """One run under the mtbf drill: its interval, goodput, step, stall and restarts (the results'
    page reads a run the same way)."""
    run = ctx.run(key)
    k = run.params.get("checkpoint_every") or 0
    if k <= 0:
        raise NotMeasured(f"{key} took no checkpoints (params.checkpoint_every={k})")
    mtbf_s = run.recovery.get("mtbf_s")
    if mtbf_s is None:
        raise NotMeasured(f"{key} ran without the mtbf drill (recovery.mtbf_s is null)")
    restarts = (run.written().get("recovery") or {}).get("restarts") or []
    return {
        **recovery_figures(run.written()),
        "k": k,
        "mtbf_s": mtbf_s,
        "failures": len(restarts),
        "redone": sum(r.get("steps_redone") or 0 for r in restarts),
    }


@READERS.add("train-goodput")
def _train_goodput(ctx: Context) -> Reading:
    """Useful steps per second at each interval, beside Daly's model fed with the runs' own step
    (the rarer run's median period: no checkpoint in it), stall (the frequent run's: the most
    checkpoints) and time to recover (every restart's median; 0 when the drill struck no rank)."""
    runs = sorted((_drill_run(ctx, key) for key in GOODPUT), key=lambda r: r["k"])
    often, rare = runs[0], runs[-1]
    mtbf_s, step_s = rare["mtbf_s"], rare["period_s"]
    checkpoint_s = often["stall_s"] or rare["stall_s"] or 0.0
    recover = [t["total_s"] for r in runs for t in r["restarts"]]
    recover_s = statistics.median(recover) if recover else 0.0
    model = [recovery_model.goodput(r["k"], step_s, checkpoint_s, recover_s, mtbf_s) for r in runs]
    best = recovery_model.best_steps(step_s, checkpoint_s, recover_s, mtbf_s)
    failures = [r["failures"] for r in runs]
    drill = (
        f"killed a rank {' and '.join(map(str, failures))} times "
        f"({' and '.join(str(r['redone']) for r in runs)} steps redone)"
        if any(failures)
        else "struck no rank in these short runs, so only the checkpoints' stall shows (R taken as 0)"
    )
    return Reading(
        [r["goodput"] for r in runs],
        model,
        values={
            "often": often["k"],
            "mtbf_s": mtbf_s,
            "step_ms": 1e3 * step_s,
            "stall_ms": 1e3 * checkpoint_s,
            "recover_s": recover_s,
            "young_daly": recovery_model.young_daly_steps(step_s, checkpoint_s, mtbf_s),
            "best": best,
            "best_goodput": recovery_model.goodput(best, step_s, checkpoint_s, recover_s, mtbf_s),
            "free_goodput": 1 / step_s,
            "stall_pct": 100 * checkpoint_s / (often["k"] * step_s + checkpoint_s),
            "drill": drill,
        },
    )
