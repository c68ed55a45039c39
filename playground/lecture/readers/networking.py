"""The readers of the lecture's §5, networking: alpha and beta of the transports, small messages,
tensor parallelism, bucketing, ring against tree."""

import math

from playground.buckets.architectures import backward_order
from playground.core.sizes import format_size, parse_size
from playground.lecture.figures import Context, NotMeasured, Reading
from playground.lecture.readers.common import Readers, find_row
from playground.models.alphabeta import AlphaBeta, fit_alpha_beta, ring_tree_crossover_bytes

READERS = Readers()


def _pingpong_fit(ctx: Context, run: str = "pingpong") -> tuple[AlphaBeta, list[dict]]:
    rows = ctx.table(run)
    return fit_alpha_beta([r["size"] for r in rows], [r["ours_us"] * 1e-6 for r in rows]), rows


def _lecture_link(ctx: Context) -> AlphaBeta:
    c = ctx.constants
    return AlphaBeta(c["link_alpha_us"] * 1e-6, c["link_beta_gbps"] * 1e9)


@READERS.add("alpha")
def _alpha(ctx: Context) -> Reading:
    return Reading(_pingpong_fit(ctx)[0].alpha_s * 1e6)


@READERS.add("alpha-shm")
def _alpha_shm(ctx: Context) -> Reading:
    return Reading(_pingpong_fit(ctx, "pingpong-shm")[0].alpha_s * 1e6)


@READERS.add("beta")
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


@READERS.add("small-message")
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


@READERS.add("tp-small")
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


@READERS.add("tp-large")
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
            "best_t": min(sims, key=lambda t: sims[t]),
            "block_ms": 2 * (one["model_ms"] - (two["model_ms"] - two["model_allreduce_ms"])) / layers,
            "calls": 2 * layers,
            "cores": ctx.result("serving-tensor")["cores"],
        },
    )


@READERS.add("bucket-speedup")
def _bucket_speedup(ctx: Context) -> Reading:
    c, link = ctx.constants, _lecture_link(ctx)
    per_tensor_s = link.sends_time_s([c["tensor_bytes"]] * c["num_tensors"])
    single_s = link.message_time_s(c["tensor_bytes"] * c["num_tensors"])
    result = ctx.result("buckets")
    rows = result["rows"]
    per, one = (
        find_row(rows, "buckets", strategy="per-tensor"),
        find_row(rows, "buckets", strategy="single bucket"),
    )
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


@READERS.add("bucket-count")
def _bucket_count(ctx: Context) -> Reading:
    c = ctx.constants
    lecture = math.ceil(c["tensor_bytes"] * c["num_tensors"] / (c["bucket_mb"] * 1e6))
    run = ctx.run("buckets")
    p = run.params
    bucketed = next((r for r in ctx.result("buckets")["rows"] if r["strategy"].startswith("bucketed")), None)
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


@READERS.add("ring-vs-tree")
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
