"""The readers of the lecture's §2, latency, throughput and queueing: a pipeline of stages, M/M/1 and
Little's law, batching, the pipeline bubble of 1F1B."""

from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row

READERS = Readers()


@READERS.add("pipeline-period")
def _pipeline_period(ctx: Context) -> Reading:
    chain = ctx.result("pipeline")["chains"][0]
    return Reading(chain["period_ms"], chain["model_period_ms"])


@READERS.add("bubbles")
def _bubbles(ctx: Context) -> Reading:
    rows = sorted(ctx.result("pipeline")["bubbles"], key=lambda r: r["micro_batches"])
    extra = [r["extra_per_step_ms"] for r in rows]
    return Reading(
        [r["bubble_pct"] for r in rows],
        [r["model_pct"] for r in rows],
        values={"extra_ms": sum(extra) / len(extra), "micro_batches": [r["micro_batches"] for r in rows]},
    )


def _loadfind_row(ctx: Context, load: float) -> tuple[dict, float]:
    row = find_row(ctx.result("queue")["loads"], "queue load", load=load)
    return row, float(ctx.run("queue").params["service_ms"])


@READERS.add("mm1-mean")
def _mm1_mean(ctx: Context) -> Reading:
    row, s_ms = _loadfind_row(ctx, 0.9)
    return Reading(
        row["mean_ms"] / s_ms,
        row["mm1_mean_ms"] / s_ms,
        values={"num": row["num"], "mean_ms": row["mean_ms"], "s_ms": s_ms},
    )


@READERS.add("mm1-p99")
def _mm1_p99(ctx: Context) -> Reading:
    row, s_ms = _loadfind_row(ctx, 0.95)
    return Reading(row["p99_ms"] / s_ms, row["model_p99_ms"] / s_ms, values={"num": row["num"]})


@READERS.add("little")
def _little(ctx: Context) -> Reading:
    row, _ = _loadfind_row(ctx, 0.9)
    return Reading(row["little_L"], row["little_lambda_W"])


@READERS.add("batching-capacity")
def _batching_capacity(ctx: Context) -> Reading:
    rows = ctx.result("batching")["capacity"]
    one, batched = find_row(rows, "capacity", max_batch=1), max(rows, key=lambda r: r["max_batch"])
    return Reading(
        [one["best_per_s"], batched["best_per_s"]],
        [one["model_per_s"], batched["model_per_s"]],
        values={"one_s": one["best_per_s"], "batched_s": batched["best_per_s"]},
    )


PP_MICRO_BATCHES = (1, 4, 16)  # the lecture's exercise 4 and section 2.2, on 4 stages


def _pp_rows(ctx: Context) -> tuple[dict, list[dict]]:
    """train-pipeline's result and its 1F1B rows at the lecture's micro-batch counts."""
    result = ctx.result("train-pipeline")
    if result["grid"]["pipeline"] != 4:
        raise NotMeasured(f"train-pipeline ran {result['grid']['pipeline']} stages, the lecture's figures 4")
    rows = {r["m"]: r for r in result["runs"] if r["schedule"] == "1f1b"}
    missing = [m for m in PP_MICRO_BATCHES if m not in rows]
    if missing:
        raise NotMeasured(f"train-pipeline ran 1F1B without m = {', '.join(map(str, missing))}")
    return result, [rows[m] for m in PP_MICRO_BATCHES]


@READERS.add("pp-bubble")
def _pp_bubble(ctx: Context) -> Reading:
    _, rows = _pp_rows(ctx)  # the schedule in simulated time: nothing of it is measured (the next row is)
    return Reading(None, [r["ideal_pct"] for r in rows])


@READERS.add("pp-bubble-measured")
def _pp_bubble_measured(ctx: Context) -> Reading:
    result, rows = _pp_rows(ctx)
    compute = result["stage_compute_ms"][str(PP_MICRO_BATCHES[-1])]
    return Reading(
        [r["bubble_pct"] for r in rows],
        [r["model_pct"] for r in rows],
        values={
            "cores": result["cores"],
            "head_x": compute[-1] / compute[0],
            "messages": 2 * (result["grid"]["pipeline"] - 1) * PP_MICRO_BATCHES[-1],
        },
    )
