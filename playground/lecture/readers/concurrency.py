"""The readers of the lecture's §3, concurrency: who sees what, the GIL, waiting, interleavings, the
lost update, overlapping compute with communication, DDP's buckets."""

import math

from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row

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
