"""The readers of the lecture's §4, virtual memory, paging and the KV cache: page tables, demand
paging, fragmentation, copy-on-write, the paged KV cache and its attention."""

from playground.core.sizes import parse_size
from playground.kvcache.workloads import EXERCISE10, SECTION45
from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row
from playground.transformer.config import ModelConfig

READERS = Readers()


@READERS.add("ex8")
def _ex8(ctx: Context) -> Reading:
    row = next(
        (r for r in ctx.table("translation") if r["process"] == "A" and int(r["virtual"], 16) == 0xC123), None
    )
    if row is None:
        raise NotMeasured("translation did not translate A:0xC123")
    return Reading(row["physical"])


@READERS.add("demand-paging")
def _demand_paging(ctx: Context) -> Reading:
    rows = [r for r in ctx.table("paging", 0) if r["pages"] == "4KiB"]
    size_mib = parse_size(ctx.run("paging").params["size_bytes"]) / 2**20
    cumulative, total = [], 0.0
    for r in rows:
        total += r["rss_delta_mib"]
        cumulative.append(total)
    return Reading(
        cumulative,
        [0.0, size_mib / 2, size_mib],
        values={
            "size_mib": size_mib,
            "faults": sum(r["minor_faults"] for r in rows[1:]),
            "page_kib": ctx.machine["page_bytes"] / 1024,
        },
    )


@READERS.add("frag-failure")
def _frag_failure(ctx: Context) -> Reading:
    failures = [r for r in ctx.table("fragmentation", 1) if r["policy"].startswith("contiguous")]
    if not failures:
        raise NotMeasured("contiguous allocation never failed")
    f = failures[0]
    return Reading([f["request"], f["free_units"], f["holes"], f["largest_hole"]])


def _paged_fragfind_row(ctx: Context) -> dict:
    return next(r for r in ctx.table("fragmentation", 0) if r["policy"].startswith("paged"))


@READERS.add("frag-paged")
def _frag_paged(ctx: Context) -> Reading:
    return Reading(_paged_fragfind_row(ctx)["external_frag_failures"])


@READERS.add("frag-internal")
def _frag_internal(ctx: Context) -> Reading:
    p = ctx.run("fragmentation").params
    half_page = (p["page_units"] - 1) / 2
    mean_block = (p["min_size"] + p["max_size"]) / 2
    return Reading(_paged_fragfind_row(ctx)["internal_frag_pct"], 100 * half_page / (mean_block + half_page))


@READERS.add("ex9")
def _ex9(ctx: Context) -> Reading:
    rows = ctx.table("pagesize", 1)
    small, big = find_row(rows, "exercise 9", page=16), find_row(rows, "exercise 9", page=256)
    return Reading([small["pages"], small["waste"], big["pages"], big["waste"]])


def _fork_pages(ctx: Context, scenario: str, spec) -> Reading:
    rows = [r for r in ctx.table(scenario) if r["policy"] == "paged"]
    unshared, fork = find_row(rows, scenario, mode="unshared"), find_row(rows, scenario, mode="fork")
    block = int(ctx.run(scenario).params.get("block_size", 16))
    model = spec.expected_pages(block)
    return Reading(
        [unshared["pages"], fork["pages"], fork["cow_copies"], fork["shared_blocks"]],
        [model["unshared"], model["fork"]],
    )


@READERS.add("cow-prefix")
def _cow_prefix(ctx: Context) -> Reading:
    return _fork_pages(ctx, "kvcache-prefix", SECTION45)


@READERS.add("ex10")
def _ex10(ctx: Context) -> Reading:
    return _fork_pages(ctx, "kvcache-ex10", EXERCISE10)


def _kv_lengths(ctx: Context) -> tuple[float, float]:
    """(mean prompt + mean output, mean prompt + max new tokens) of the run's workload."""
    p = ctx.run("kvcache").params
    prompt = (p["prompt_min"] + p["prompt_max"]) / 2
    return prompt + p["output_mean"], prompt + p["max_new_tokens"]


@READERS.add("kv-concurrency")
def _kv_concurrency(ctx: Context) -> Reading:
    rows = ctx.table("kvcache")
    paged, reserve = (
        find_row(rows, "kvcache", policy="paged"),
        find_row(rows, "kvcache", policy="reserve_max"),
    )
    used, reserved = _kv_lengths(ctx)
    return Reading(
        paged["peak_seqs"] / reserve["peak_seqs"],
        reserved / used,
        values={"paged": paged["peak_seqs"], "reserve": reserve["peak_seqs"]},
    )


@READERS.add("kv-reserve-waste")
def _kv_reserve_waste(ctx: Context) -> Reading:
    reserve = find_row(ctx.table("kvcache"), "kvcache", policy="reserve_max")
    used, reserved = _kv_lengths(ctx)
    return Reading(reserve["internal_pct"], 100 * (1 - used / reserved))


@READERS.add("paged-attention-cost")
def _paged_attention_cost(ctx: Context) -> Reading:
    at16 = [r for r in ctx.table("paged-attention") if r["block_size"] == 16]
    if not at16:
        raise NotMeasured("paged-attention measured no block of 16")
    longest = max(at16, key=lambda r: r["context"])
    p = ctx.run("paged-attention").params
    return Reading(
        longest["paged_x"],
        longest["in_order_x"],
        values={
            "block_bytes": 16 * p.get("heads", 8) * p.get("head_dim", 64) * 4,
            "paged": longest["paged_x"],
            "in_order": longest["in_order_x"],
            "context": longest["context"],
            "best": min(r["paged_x"] for r in at16),
            "worst": max(r["paged_x"] for r in at16),
        },
    )


def _step_weight_bytes(config: ModelConfig) -> int:
    """What a decode step reads of the weights: all but the position table (one row a token)."""
    return config.param_bytes - config.context * config.d_model * config.np_dtype.itemsize


@READERS.add("kv-throughput")
def _kv_throughput(ctx: Context) -> Reading:
    run = "serving-throughput"
    rows = ctx.table(run)
    paged, reserve = find_row(rows, run, policy="paged"), find_row(rows, run, policy="reserve_max")
    config = ModelConfig.from_dict(ctx.result(run)["model"])
    return Reading(
        paged["tokens_per_s"] / reserve["tokens_per_s"],
        paged["peak_seqs"] / reserve["peak_seqs"],
        values={
            "paged_seqs": paged["peak_seqs"],
            "reserve_seqs": reserve["peak_seqs"],
            "paged_tps": paged["tokens_per_s"],
            "reserve_tps": reserve["tokens_per_s"],
            "weights_mib": _step_weight_bytes(config) / 2**20,
            "kv_tokens": _step_weight_bytes(config) / config.kv_bytes_per_token,
            "held_tokens": paged["util_pct"] / 100 * ctx.run(run).params["capacity_tokens"],
        },
    )
