"""The readers of the lecture's §1, memory hierarchy: the cache staircase (pointer chase), strided
reads, a gather in random order, a mixture-of-experts layer's permutation both ways."""

from playground.core.sizes import format_size, parse_size
from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row

READERS = Readers()


@READERS.add("l1-latency")
def _l1_latency(ctx: Context) -> Reading:
    first = ctx.result("cache")["levels"][0]
    return Reading(first["latency_ns"], values={"l1_size": first["os_size"]})


@READERS.add("l2-latency")
def _l2_latency(ctx: Context) -> Reading:
    level = next((lv for lv in ctx.result("cache")["levels"] if lv["level"].startswith("L2")), None)
    if level is None:
        raise NotMeasured("cache detected no L2 plateau")
    return Reading(level["latency_ns"], values={"l2_size": level["os_size"]})


@READERS.add("dram-latency")
def _dram_latency(ctx: Context) -> Reading:
    last = ctx.table("cache")[-1]
    return Reading(
        last["ns_per_load"], values={"dram_ns": last["ns_per_load"], "largest": last["working_set"]}
    )


@READERS.add("dram-vs-l1")
def _dram_vs_l1(ctx: Context) -> Reading:
    l1 = ctx.result("cache")["levels"][0]["latency_ns"]
    return Reading(ctx.table("cache")[-1]["ns_per_load"] / l1)


def _stride_ratio(ctx: Context, a: int, b: int, **values) -> Reading:
    rows = ctx.table("stride")
    ra, rb = find_row(rows, "stride", stride_elems=a), find_row(rows, "stride", stride_elems=b)
    return Reading(
        ra["ms_per_pass"] / rb["ms_per_pass"],
        ra["lines_touched"] / rb["lines_touched"],
        values={"line": ctx.machine.get("line", "?"), **values},
    )


@READERS.add("stride-flat")
def _stride_flat(ctx: Context) -> Reading:
    t8 = _stride_ratio(ctx, 8, 4).measured
    return _stride_ratio(ctx, 16, 4, t8_ratio=t8)


@READERS.add("stride-halves")
def _stride_halves(ctx: Context) -> Reading:
    return _stride_ratio(ctx, 256, 128)


@READERS.add("gather-random")
def _gather_random(ctx: Context) -> Reading:
    rows = ctx.table("gather")
    seq, rand = find_row(rows, "gather", order="sequential"), find_row(rows, "gather", order="random")
    line = ctx.machine["line"]
    element_bytes = 4  # the gather node's float32 elements
    return Reading(
        rand["np_take_ms"] / seq["np_take_ms"],
        line / element_bytes,
        values={
            "line": line,
            "seq_ms": seq["np_take_ms"],
            "rand_ms": rand["np_take_ms"],
            "size": format_size(parse_size(ctx.run("gather").params.get("src_bytes", 0))),
        },
    )


@READERS.add("moe-permute")
def _moe_permute(ctx: Context) -> Reading:
    row = find_row(ctx.result("train-moe").get("permute") or [], "permutation", workload="balanced")
    params = ctx.run("train-moe").params
    return Reading(
        row["ratio"],
        values={
            "sorted_ms": row["sorted_ms"],
            "gathered_ms": row["gathered_ms"],
            "tokens": params.get("batch", 8) * params.get("context", 32),
            "row_bytes": params.get("d_model", 64) * 8,  # the scenario's float64 rows
        },
    )
