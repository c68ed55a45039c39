"""One reader per lecture figure: where in the scenarios' results its values live.

A reader gets a `Context` (the runs, the section's constants, the machine) and returns a
`Reading` of this machine's value, the model's and, when the lecture gives only the inputs, the
lecture's own figure computed from them. Values come from result.json and the resolved
scenario.yaml of each run; the lecture's figures themselves are only in lecture.yaml.
"""

import math

from playground.buckets.architectures import backward_order
from playground.core.sizes import format_size, parse_size
from playground.kvcache.workloads import EXERCISE10, SECTION45
from playground.lecture.figures import Context, NotMeasured, Reading
from playground.models.alphabeta import AlphaBeta, fit_alpha_beta, ring_tree_crossover_bytes
from playground.transformer.config import ModelConfig

READERS = {}


def reader(figure_id: str):
    def register(fn):
        READERS[figure_id] = fn
        return fn

    return register


def _row(rows: list[dict], what: str, **match) -> dict:
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    raise NotMeasured(f"no {what} row with {', '.join(f'{k}={v!r}' for k, v in match.items())}")


# -- 1. memory hierarchy -------------------------------------------------------------------------


@reader("l1-latency")
def _l1_latency(ctx: Context) -> Reading:
    first = ctx.result("cache")["levels"][0]
    return Reading(first["latency_ns"], values={"l1_size": first["os_size"]})


@reader("l2-latency")
def _l2_latency(ctx: Context) -> Reading:
    level = next((lv for lv in ctx.result("cache")["levels"] if lv["level"].startswith("L2")), None)
    if level is None:
        raise NotMeasured("cache detected no L2 plateau")
    return Reading(level["latency_ns"], values={"l2_size": level["os_size"]})


@reader("dram-latency")
def _dram_latency(ctx: Context) -> Reading:
    last = ctx.table("cache")[-1]
    return Reading(
        last["ns_per_load"], values={"dram_ns": last["ns_per_load"], "largest": last["working_set"]}
    )


@reader("dram-vs-l1")
def _dram_vs_l1(ctx: Context) -> Reading:
    l1 = ctx.result("cache")["levels"][0]["latency_ns"]
    return Reading(ctx.table("cache")[-1]["ns_per_load"] / l1)


def _stride_ratio(ctx: Context, a: int, b: int, **values) -> Reading:
    rows = ctx.table("stride")
    ra, rb = _row(rows, "stride", stride_elems=a), _row(rows, "stride", stride_elems=b)
    return Reading(
        ra["ms_per_pass"] / rb["ms_per_pass"],
        ra["lines_touched"] / rb["lines_touched"],
        values={"line": ctx.machine.get("line", "?"), **values},
    )


@reader("stride-flat")
def _stride_flat(ctx: Context) -> Reading:
    t8 = _stride_ratio(ctx, 8, 4).measured
    return _stride_ratio(ctx, 16, 4, t8_ratio=t8)


@reader("stride-halves")
def _stride_halves(ctx: Context) -> Reading:
    return _stride_ratio(ctx, 256, 128)


@reader("gather-random")
def _gather_random(ctx: Context) -> Reading:
    rows = ctx.table("gather")
    seq, rand = _row(rows, "gather", order="sequential"), _row(rows, "gather", order="random")
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


# -- 2. latency, throughput and queueing ---------------------------------------------------------


@reader("pipeline-period")
def _pipeline_period(ctx: Context) -> Reading:
    chain = ctx.result("pipeline")["chains"][0]
    return Reading(chain["period_ms"], chain["model_period_ms"])


@reader("bubbles")
def _bubbles(ctx: Context) -> Reading:
    rows = sorted(ctx.result("pipeline")["bubbles"], key=lambda r: r["micro_batches"])
    extra = [r["extra_per_step_ms"] for r in rows]
    return Reading(
        [r["bubble_pct"] for r in rows],
        [r["model_pct"] for r in rows],
        values={"extra_ms": sum(extra) / len(extra), "micro_batches": [r["micro_batches"] for r in rows]},
    )


def _load_row(ctx: Context, load: float) -> tuple[dict, float]:
    row = _row(ctx.result("queue")["loads"], "queue load", load=load)
    return row, float(ctx.run("queue").params["service_ms"])


@reader("mm1-mean")
def _mm1_mean(ctx: Context) -> Reading:
    row, s_ms = _load_row(ctx, 0.9)
    return Reading(
        row["mean_ms"] / s_ms,
        row["mm1_mean_ms"] / s_ms,
        values={"num": row["num"], "mean_ms": row["mean_ms"], "s_ms": s_ms},
    )


@reader("mm1-p99")
def _mm1_p99(ctx: Context) -> Reading:
    row, s_ms = _load_row(ctx, 0.95)
    return Reading(row["p99_ms"] / s_ms, row["model_p99_ms"] / s_ms, values={"num": row["num"]})


@reader("little")
def _little(ctx: Context) -> Reading:
    row, _ = _load_row(ctx, 0.9)
    return Reading(row["little_L"], row["little_lambda_W"])


@reader("batching-capacity")
def _batching_capacity(ctx: Context) -> Reading:
    rows = ctx.result("batching")["capacity"]
    one, batched = _row(rows, "capacity", max_batch=1), max(rows, key=lambda r: r["max_batch"])
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


@reader("pp-bubble")
def _pp_bubble(ctx: Context) -> Reading:
    _, rows = _pp_rows(ctx)  # the schedule in simulated time: nothing of it is measured (the next row is)
    return Reading(None, [r["ideal_pct"] for r in rows])


@reader("pp-bubble-measured")
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


# -- 3. concurrency ------------------------------------------------------------------------------


@reader("who-sees")
def _who_sees(ctx: Context) -> Reading:
    rows = ctx.table("concurrency", 0)
    return Reading(
        [
            _row(rows, "writer", writer="thread")["main_sees"],
            _row(rows, "writer", writer="child process")["main_sees"],
        ]
    )


@reader("gil")
def _gil(ctx: Context) -> Reading:
    rows = ctx.result("concurrency")["gil"]
    threads = next(r for r in rows if r["how"].endswith("threads"))
    procs = next(r for r in rows if r["how"].endswith("processes"))
    return Reading([threads["speedup"], procs["speedup"]], [threads["model_speedup"], procs["model_speedup"]])


@reader("waits")
def _waits(ctx: Context) -> Reading:
    rows = ctx.result("concurrency")["waits"]
    return Reading([r["time_s"] for r in rows], [r["model_s"] for r in rows])


@reader("interleavings")
def _interleavings(ctx: Context) -> Reading:
    cases = ctx.result("race")["interleavings"]
    case = next((c for c in cases if "x 2 increment" in c["case"]), None)
    if case is None:
        raise NotMeasured("race ran no 2 x 2 interleaving case")
    finals = dict(part.split(": ") for part in case["final_values"].split(", "))
    steps = 2 * 3  # two increments of read, add, write per thread
    return Reading([case["orders"], *(int(finals[f"x={x}"]) for x in (2, 3, 4))], math.comb(2 * steps, steps))


@reader("lost-update")
def _lost_update(ctx: Context) -> Reading:
    no_lock = _row(ctx.table("race", 0), "race variant", variant="no lock")
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


@reader("lock-atomic")
def _lock_atomic(ctx: Context) -> Reading:
    rows = ctx.table("race", 0)
    lock = _row(rows, "race variant", variant="lock")
    atomic = next((r for r in rows if r["variant"].startswith("atomic")), None)
    if atomic is None:
        raise NotMeasured("race ran no atomic variant")
    return Reading([lock["lost"], atomic["lost"]])


@reader("overlap-hidden")
def _overlap_hidden(ctx: Context) -> Reading:
    rows = ctx.table("overlap", 0)
    serial = _row(rows, "overlap", setting="compute-bound", mode="serial")
    over = _row(rows, "overlap", setting="compute-bound", mode="overlap")
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


@reader("train-overlap")
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


@reader("train-buckets")
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


# -- 4. virtual memory, paging and the KV cache --------------------------------------------------


@reader("ex8")
def _ex8(ctx: Context) -> Reading:
    row = next(
        (r for r in ctx.table("translation") if r["process"] == "A" and int(r["virtual"], 16) == 0xC123), None
    )
    if row is None:
        raise NotMeasured("translation did not translate A:0xC123")
    return Reading(row["physical"])


@reader("demand-paging")
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


@reader("frag-failure")
def _frag_failure(ctx: Context) -> Reading:
    failures = [r for r in ctx.table("fragmentation", 1) if r["policy"].startswith("contiguous")]
    if not failures:
        raise NotMeasured("contiguous allocation never failed")
    f = failures[0]
    return Reading([f["request"], f["free_units"], f["holes"], f["largest_hole"]])


def _paged_frag_row(ctx: Context) -> dict:
    return next(r for r in ctx.table("fragmentation", 0) if r["policy"].startswith("paged"))


@reader("frag-paged")
def _frag_paged(ctx: Context) -> Reading:
    return Reading(_paged_frag_row(ctx)["external_frag_failures"])


@reader("frag-internal")
def _frag_internal(ctx: Context) -> Reading:
    p = ctx.run("fragmentation").params
    half_page = (p["page_units"] - 1) / 2
    mean_block = (p["min_size"] + p["max_size"]) / 2
    return Reading(_paged_frag_row(ctx)["internal_frag_pct"], 100 * half_page / (mean_block + half_page))


@reader("ex9")
def _ex9(ctx: Context) -> Reading:
    rows = ctx.table("pagesize", 1)
    small, big = _row(rows, "exercise 9", page=16), _row(rows, "exercise 9", page=256)
    return Reading([small["pages"], small["waste"], big["pages"], big["waste"]])


def _fork_pages(ctx: Context, scenario: str, spec) -> Reading:
    rows = [r for r in ctx.table(scenario) if r["policy"] == "paged"]
    unshared, fork = _row(rows, scenario, mode="unshared"), _row(rows, scenario, mode="fork")
    block = int(ctx.run(scenario).params.get("block_size", 16))
    model = spec.expected_pages(block)
    return Reading(
        [unshared["pages"], fork["pages"], fork["cow_copies"], fork["shared_blocks"]],
        [model["unshared"], model["fork"]],
    )


@reader("cow-prefix")
def _cow_prefix(ctx: Context) -> Reading:
    return _fork_pages(ctx, "kvcache-prefix", SECTION45)


@reader("ex10")
def _ex10(ctx: Context) -> Reading:
    return _fork_pages(ctx, "kvcache-ex10", EXERCISE10)


def _kv_lengths(ctx: Context) -> tuple[float, float]:
    """(mean prompt + mean output, mean prompt + max new tokens) of the run's workload."""
    p = ctx.run("kvcache").params
    prompt = (p["prompt_min"] + p["prompt_max"]) / 2
    return prompt + p["output_mean"], prompt + p["max_new_tokens"]


@reader("kv-concurrency")
def _kv_concurrency(ctx: Context) -> Reading:
    rows = ctx.table("kvcache")
    paged, reserve = _row(rows, "kvcache", policy="paged"), _row(rows, "kvcache", policy="reserve_max")
    used, reserved = _kv_lengths(ctx)
    return Reading(
        paged["peak_seqs"] / reserve["peak_seqs"],
        reserved / used,
        values={"paged": paged["peak_seqs"], "reserve": reserve["peak_seqs"]},
    )


@reader("kv-reserve-waste")
def _kv_reserve_waste(ctx: Context) -> Reading:
    reserve = _row(ctx.table("kvcache"), "kvcache", policy="reserve_max")
    used, reserved = _kv_lengths(ctx)
    return Reading(reserve["internal_pct"], 100 * (1 - used / reserved))


@reader("paged-attention-cost")
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


@reader("kv-throughput")
def _kv_throughput(ctx: Context) -> Reading:
    run = "serving-throughput"
    rows = ctx.table(run)
    paged, reserve = _row(rows, run, policy="paged"), _row(rows, run, policy="reserve_max")
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


# -- 5. networking -------------------------------------------------------------------------------


def _pingpong_fit(ctx: Context, run: str = "pingpong") -> tuple[AlphaBeta, list[dict]]:
    rows = ctx.table(run)
    return fit_alpha_beta([r["size"] for r in rows], [r["ours_us"] * 1e-6 for r in rows]), rows


def _lecture_link(ctx: Context) -> AlphaBeta:
    c = ctx.constants
    return AlphaBeta(c["link_alpha_us"] * 1e-6, c["link_beta_gbps"] * 1e9)


@reader("alpha")
def _alpha(ctx: Context) -> Reading:
    return Reading(_pingpong_fit(ctx)[0].alpha_s * 1e6)


@reader("alpha-shm")
def _alpha_shm(ctx: Context) -> Reading:
    return Reading(_pingpong_fit(ctx, "pingpong-shm")[0].alpha_s * 1e6)


@reader("beta")
def _beta(ctx: Context) -> Reading:
    fit, _ = _pingpong_fit(ctx)
    return Reading(fit.beta_bytes_per_s / 1e9)


def _calibration(ctx: Context, run: str = "pingpong"):
    """This machine's calibration (models/calibration.py) if there is one for the run's transport;
    one of another machine or version is left out (the page keeps the run's own fit)."""
    from playground.models.calibration import CalibrationMismatch, find_calibration

    transport = ctx.result(run).get("transport") or "ipc"
    try:
        calibration = find_calibration()
    except CalibrationMismatch:
        return None, transport
    return (calibration if calibration is not None and calibration.has(transport) else None), transport


@reader("small-message")
def _small_message(ctx: Context) -> Reading:
    fit, rows = _pingpong_fit(ctx)
    small = min(rows, key=lambda r: r["size"])
    calibration, transport = _calibration(ctx)
    if calibration is not None:
        model_s = calibration.link(transport).message_time_s(small["size"])
        source = f"one way by this machine's calibration ({transport})"
    else:
        model_s, source = fit.message_time_s(small["size"]), "alpha + n / beta of this run's fit"
    return Reading(small["ours_us"], model_s * 1e6, values={"size": small["size"], "model_source": source})


def _tp_rows(ctx: Context, shape: str) -> dict[int, dict]:
    """serving-tensor's rows of one model shape by t."""
    rows = {r["t"]: r for r in ctx.result("serving-tensor")["rows"] if r["shape"] == shape}
    if 1 not in rows or 2 not in rows or math.isnan(rows[2]["measured_ms"]):
        raise NotMeasured(f"serving-tensor measured the {shape} model without t = 1 and 2")
    return rows


def _tp_values(ctx: Context, shape: str) -> dict:
    params = ctx.run("serving-tensor").params
    d = {"small": 64, "large": 512}[shape]
    return {"batch": params.get("batch", 8), "d_model": d, "kib": params.get("batch", 8) * d * 4 / 1024}


@reader("tp-small")
def _tp_small(ctx: Context) -> Reading:
    rows, values = _tp_rows(ctx, "small"), _tp_values(ctx, "small")
    one, two = rows[1], rows[2]
    layers = 2  # the small shape's
    return Reading(
        two["measured_ms"] / one["measured_ms"],
        two["model_ms"] / one["model_ms"],
        values={
            **values,
            "saved_us": 1e3 * (one["model_ms"] - (two["model_ms"] - two["model_allreduce_ms"])) / layers,
            "ar_us": 1e3 * two["allreduce_ms"] / (2 * layers),
            "model_ar_us": 1e3 * two["model_allreduce_ms"] / (2 * layers),
        },
    )


@reader("tp-large")
def _tp_large(ctx: Context) -> Reading:
    rows, values = _tp_rows(ctx, "large"), _tp_values(ctx, "large")
    one, two, layers = rows[1], rows[2], 8
    sims = {t: r["sim_ms"] for t, r in rows.items() if not math.isnan(r["sim_ms"])}
    if 1 not in sims or 8 not in sims:
        raise NotMeasured("serving-tensor did not simulate the large model at t = 1 and 8")
    return Reading(
        one["measured_ms"] / two["measured_ms"],
        one["model_ms"] / two["model_ms"],
        values={
            **values,
            "sim8": sims[1] / sims[8],
            "best_t": min(sims, key=sims.get),
            "block_ms": 2 * (one["model_ms"] - (two["model_ms"] - two["model_allreduce_ms"])) / layers,
            "calls": 2 * layers,
            "cores": ctx.result("serving-tensor")["cores"],
        },
    )


@reader("bucket-speedup")
def _bucket_speedup(ctx: Context) -> Reading:
    c, link = ctx.constants, _lecture_link(ctx)
    per_tensor_s = link.sends_time_s([c["tensor_bytes"]] * c["num_tensors"])
    single_s = link.message_time_s(c["tensor_bytes"] * c["num_tensors"])
    result = ctx.result("buckets")
    rows = result["rows"]
    per, one = _row(rows, "buckets", strategy="per-tensor"), _row(rows, "buckets", strategy="single bucket")
    return Reading(
        per["measured_ms"] / one["measured_ms"],
        per["model_ms"] / one["model_ms"],
        lecture=round(per_tensor_s / single_s, 1),
        values={
            "lecture_per_tensor_ms": per_tensor_s * 1e3,
            "lecture_single_ms": single_s * 1e3,
            "ranks": result["ranks"],
            "msgs": per["messages"] // per["num_allreduces"],
            "alpha_us": result["alpha_beta"]["alpha_s"] * 1e6,
            "scale": float(ctx.run("buckets").params.get("scale", 1.0)),
        },
    )


@reader("bucket-count")
def _bucket_count(ctx: Context) -> Reading:
    c = ctx.constants
    lecture = math.ceil(c["tensor_bytes"] * c["num_tensors"] / (c["bucket_mb"] * 1e6))
    run = ctx.run("buckets")
    p = run.params
    bucketed = next((r for r in run.result["rows"] if r["strategy"].startswith("bucketed")), None)
    if bucketed is None:
        raise NotMeasured("buckets ran no bucketed strategy")
    if p.get("tensor_bytes"):
        total = sum(parse_size(n) for n in p["tensor_bytes"])
    else:
        total = sum(t.num_bytes() for t in backward_order(p["architecture"]))
    cap = bucketed["cap_mb"] * 2**20
    return Reading(
        bucketed["num_allreduces"],
        math.ceil(total / cap),
        lecture=lecture,
        values={"first_mb": p.get("first_bucket_mb") or bucketed["cap_mb"]},
    )


@reader("ring-vs-tree")
def _ring_vs_tree(ctx: Context) -> Reading:
    n_lecture = ctx.constants["num_ranks"]
    result = ctx.result("bench")
    rows = result["rows"]
    ring = {r["size"]: r["time_us"] for r in rows if r["algorithm"] == "ring"}
    tree = {r["size"]: r["time_us"] for r in rows if r["algorithm"] == "tree"}
    sizes = sorted(set(ring) & set(tree))
    if not sizes:
        raise NotMeasured("bench ran ring and tree at no common size")
    ring_wins = [ring[s] < tree[s] for s in sizes]
    # the smallest size from which the ring wins at every larger size
    k = len(sizes)
    while k > 0 and ring_wins[k - 1]:
        k -= 1
    if k == len(sizes):
        measured = f"above {format_size(sizes[-1])} (the tree won at every size run)"
    elif k == 0:
        measured = f"below {format_size(sizes[0])} (the ring won at every size run)"
    else:
        measured = f"between {format_size(sizes[k - 1])} and {format_size(sizes[k])}"
    calibration, transport = _calibration(ctx, "bench")
    if calibration is not None:
        model = _calibrated_crossover(calibration, transport, result["ranks"])
        source = f"this machine's calibration ({transport}; the simulator where ranks outnumber cores)"
    else:
        model, source = (
            ring_tree_crossover_bytes(_pingpong_fit(ctx)[0], result["ranks"]),
            "alpha-beta of this run's ping-pong",
        )
    return Reading(
        measured,
        model,
        lecture=ring_tree_crossover_bytes(_lecture_link(ctx), n_lecture),
        values={"ranks": result["ranks"], "model_source": source},
    )


def _calibrated_crossover(calibration, transport: str, ranks: int) -> float:
    """The smallest power of two from which the ring stays faster than the tree on the calibrated
    machine: by the closed forms while ranks have a core each, else by the simulator on its host."""
    from playground.collectives import registry
    from playground.sim.driver import simulate
    from playground.sim.network import Machine

    def time_s(algorithm: str, size: int) -> float:
        if ranks <= calibration.cores:
            return registry.get("allreduce", algorithm).cost(
                size, ranks, calibration.link(transport, ranks, size)
            )
        host = calibration.host(transport, ranks, size)
        link = calibration.link(transport)
        machine = Machine(1, ranks, link, link, host.gamma_bytes_per_s, host.cores, host)
        row, _ = simulate(
            machine,
            "allreduce",
            algorithm,
            size,
            data=False,
            segment_bytes=calibration.segment_bytes(transport),
        )
        return row["time_us"]

    sizes = [1 << k for k in range(3, 27)]  # 8 B .. 64 MiB
    ring_wins = [time_s("ring", n) < time_s("tree", n) for n in sizes]
    k = len(sizes)
    while k > 0 and ring_wins[k - 1]:
        k -= 1
    return float(sizes[k]) if k < len(sizes) else math.inf
