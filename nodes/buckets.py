"""Per-tensor vs bucketed vs single-bucket gradient all-reduce, measured beside the alpha-beta model.

Every rank holds the gradients of a model (real tensor sizes, backward order) in one flat
float32 buffer, so a bucket is a view of consecutive tensors, as with DDP's
`gradient_as_bucket_view`. Each strategy all-reduces the same data: one all-reduce per tensor,
DDP-style buckets under a cap (first bucket 1 MiB), or one bucket. A quick ping-pong at the
start measures alpha and beta; the model predicts each schedule as the sum of its all-reduces.
Every result is checked bit for bit against numpy on every rank (see buckets.gradients).
"""

import os
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.buckets.architectures import backward_order
from playground.buckets.bucketing import MIB, Bucket, assign_buckets, per_tensor, single_bucket
from playground.buckets.gradients import count_wrong, make_base, rank_gradient
from playground.buckets.pingpong import measure_alpha_beta
from playground.collectives import allreduce
from playground.errors import ParamError
from playground.models.alphabeta import AlphaBeta, allreduce_messages_per_rank
from playground.plot import figure
from playground.report import Report, Table
from playground.sizes import Size, format_size

ITEMSIZE = 4  # float32 gradients
Strategy = Literal["per_tensor", "bucketed", "single"]


@dataclass(frozen=True)
class Params:
    model: Literal["lecture", "resnet50", "gpt2"] = "lecture"
    tensor_bytes: tuple[Size, ...] | None = None  # a custom list (backward order); replaces `model`
    scale: float = 1.0  # every tensor (and cap) x scale, to keep runs short; 1.0 = real sizes
    bucket_mb: tuple[float, ...] = (25.0,)  # caps in MiB (DDP's bucket_cap_mb); several = a sweep
    first_bucket_mb: float | None = 1.0  # DDP's smaller first bucket; null = same as the cap
    strategies: tuple[Strategy, ...] = ("per_tensor", "bucketed", "single")
    algorithm: Literal["ring", "tree"] = "ring"
    iters: int = 3
    warmup: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.tensor_bytes is not None:
            if not self.tensor_bytes:
                raise ParamError(
                    "tensor_bytes",
                    "empty list; give the gradient sizes in backward order, or remove the key to use `model`",
                )
            for i, n in enumerate(self.tensor_bytes):
                if n < ITEMSIZE or n % ITEMSIZE:
                    raise ParamError(
                        "tensor_bytes",
                        f"entry {i} is {n}; each size must be a positive "
                        f"multiple of {ITEMSIZE} bytes (float32 gradients)",
                    )
        if not 0 < self.scale <= 4:
            raise ParamError("scale", f"must be in (0, 4], got {self.scale}")
        if not self.bucket_mb:
            raise ParamError("bucket_mb", "give at least one cap in MiB, e.g. [25]")
        for cap in self.bucket_mb:
            if cap <= 0:
                raise ParamError(
                    "bucket_mb",
                    f"caps must be > 0 MiB, got {cap} (one all-reduce per tensor is strategy per_tensor)",
                )
        if self.first_bucket_mb is not None and self.first_bucket_mb <= 0:
            raise ParamError("first_bucket_mb", f"must be > 0 MiB or null, got {self.first_bucket_mb}")
        if not self.strategies:
            raise ParamError("strategies", "give at least one of per_tensor, bucketed, single")
        if self.iters < 1:
            raise ParamError("iters", f"must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")

    @property
    def source(self) -> str:
        return f"custom list of {len(self.tensor_bytes)} tensors" if self.tensor_bytes else self.model


def tensor_elements(p: Params) -> list[int]:
    """Elements of each gradient tensor in backward order, after `scale`."""
    if p.tensor_bytes:
        elems = [n // ITEMSIZE for n in p.tensor_bytes]
    else:
        elems = [t.num_elements for t in backward_order(p.model)]
    return elems if p.scale == 1 else [max(1, round(n * p.scale)) for n in elems]


def schedules(p: Params, tensor_bytes: list[int]) -> list[tuple[str, float | None, list[Bucket]]]:
    """(label, cap in MiB or None, buckets) for every strategy, in the order they run."""
    out = []
    for s in p.strategies:
        if s == "per_tensor":
            out.append(("per-tensor", None, per_tensor(tensor_bytes)))
        elif s == "single":
            out.append(("single bucket", None, single_bucket(tensor_bytes)))
        else:
            for cap_mb in p.bucket_mb:
                first = None if p.first_bucket_mb is None else round(p.first_bucket_mb * MIB * p.scale)
                buckets = assign_buckets(tensor_bytes, round(cap_mb * MIB * p.scale), first)
                out.append((f"bucketed {cap_mb:g} MiB", cap_mb, buckets))
    return out


def run_schedule(comm, grads: np.ndarray, offsets: list[int], buckets: list[Bucket], p: Params, tick) -> dict:
    """Warm-up, then `iters` timed passes; every pass's results are checked after its timing."""
    times_s, sent_bytes, wrong = [], 0, 0
    views = [grads[offsets[b.first] : offsets[b.first + b.num_tensors]] for b in buckets]
    for it in range(p.warmup + p.iters):
        comm.barrier()
        sent0 = comm.bytes_sent
        t0 = time.perf_counter()
        with comm.tracer.span("schedule", cat="phase", buckets=len(buckets), iter=it):
            outs = []
            for b, view in zip(buckets, views, strict=True):
                with comm.tracer.span("bucket.allreduce", cat="op", bucket=b.index, bytes=b.num_bytes):
                    outs.append(allreduce(comm, view, algorithm=p.algorithm))
        dt = time.perf_counter() - t0
        if it >= p.warmup:
            times_s.append(dt)
            sent_bytes = comm.bytes_sent - sent0
        wrong += sum(
            count_wrong(out, view, comm.rank, comm.size) for out, view in zip(outs, views, strict=True)
        )
        del outs
        comm.tracer.flush()
        tick()
    return {"times_s": times_s, "sent_bytes": sent_bytes, "wrong": wrong}


def main(comm, params: Params) -> dict:
    fit, points = measure_alpha_beta(comm)
    loaded, _ = measure_alpha_beta(comm, loaded=True) if comm.size > 2 else (fit, points)
    elems = tensor_elements(params)
    offsets = np.concatenate([[0], np.cumsum(elems)]).tolist()
    grads = rank_gradient(make_base(offsets[-1], params.seed), comm.rank)
    tensor_bytes = [n * ITEMSIZE for n in elems]
    plan = schedules(params, tensor_bytes)
    total = len(plan) * (params.warmup + params.iters)
    done = 0
    rows = []
    for label, cap_mb, buckets in plan:

        def tick(label=label):
            nonlocal done
            done += 1
            comm.progress(done, total, label)

        comm.progress(done, total, label)
        res = run_schedule(comm, grads, offsets, buckets, params, tick)
        rows.append(
            {
                "strategy": label,
                "cap_mb": cap_mb,
                "num_allreduces": len(buckets),
                "bucket_bytes": [b.num_bytes for b in buckets],
                **res,
            }
        )
    return {
        "ok": all(r["wrong"] == 0 for r in rows),
        "rows": rows,
        "num_tensors": len(elems),
        "total_bytes": offsets[-1] * ITEMSIZE,
        "alpha_beta": None
        if fit is None
        else {"alpha_s": fit.alpha_s, "beta_bytes_per_s": fit.beta_bytes_per_s, "points": points},
        "alpha_beta_loaded": None
        if loaded is None
        else {"alpha_s": loaded.alpha_s, "beta_bytes_per_s": loaded.beta_bytes_per_s},
    }


COLUMNS = {
    "strategy": "strategy",
    "num_allreduces": "all-reduces",
    "messages": "msgs/rank (model)",
    "payload": "bytes/rank",
    "sent": "sent/rank",
    "measured_ms": "measured (ms)",
    "model_ms": "model (ms)",
    "diff_ms": "measured - model (ms)",
    "ratio": "measured/model",
    "loaded_model_ms": "model, loaded link (ms)",
    "wrong": "#wrong",
}


def combine(results: list[dict], params: Params) -> list[dict]:
    """One row per strategy: per pass the slowest rank's time (a step ends when the last rank
    does), then the median over passes."""
    n = len(results)
    ab, abl = results[0]["alpha_beta"], results[0]["alpha_beta_loaded"]
    model = AlphaBeta(ab["alpha_s"], ab["beta_bytes_per_s"]) if ab else None
    loaded = AlphaBeta(abl["alpha_s"], abl["beta_bytes_per_s"]) if abl else None
    rows = []
    for k, base in enumerate(results[0]["rows"]):
        per_rank = [res["rows"][k] for res in results]
        slowest = [max(r["times_s"][i] for r in per_rank) for i in range(len(base["times_s"]))]
        measured = float(np.median(slowest))
        model_s = model.schedule_time_s(base["bucket_bytes"], n, params.algorithm) if model else float("nan")
        rows.append(
            {
                "strategy": base["strategy"],
                "cap_mb": base["cap_mb"],
                "num_allreduces": base["num_allreduces"],
                "messages": base["num_allreduces"] * allreduce_messages_per_rank(n, params.algorithm),
                "payload": format_size(sum(base["bucket_bytes"])),
                "sent": format_size(base["sent_bytes"]),
                "measured_ms": measured * 1e3,
                "model_ms": model_s * 1e3,
                "diff_ms": (measured - model_s) * 1e3,
                "ratio": measured / model_s if model and model_s > 0 else float("nan"),
                "loaded_model_ms": (
                    loaded.schedule_time_s(base["bucket_bytes"], n, params.algorithm) * 1e3
                    if loaded
                    else float("nan")
                ),
                "wrong": sum(r["wrong"] for r in per_rank),
            }
        )
    return rows


def plot_sweep(rows: list[dict], path) -> bool:
    """Step time against bucket cap (measured and modelled), per-tensor and single as lines."""
    swept = sorted((r for r in rows if r["cap_mb"] is not None), key=lambda r: r["cap_mb"])
    if not swept:
        return False
    with figure(path, (7, 4.2), dpi=120) as (_, ax):
        caps = [r["cap_mb"] for r in swept]
        ax.plot(caps, [r["measured_ms"] for r in swept], "o-", label="bucketed, measured")
        ax.plot(caps, [r["model_ms"] for r in swept], "s--", label="bucketed, alpha-beta model")
        for r, style in (
            (next((x for x in rows if x["strategy"] == "per-tensor"), None), ":"),
            (next((x for x in rows if x["strategy"] == "single bucket"), None), "-."),
        ):
            if r:
                ax.axhline(
                    r["measured_ms"], linestyle=style, color="gray", label=f"{r['strategy']}, measured"
                )
        ax.set_xscale("log")
        ax.set_xlabel("bucket cap (MiB)")
        ax.set_ylabel("all-reduce time per step (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    return True


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    n = len(results)
    rows = combine(results, params)
    r0 = results[0]
    failures = [
        f"{r['strategy']}: {r['wrong']} wrong elements (summed over ranks)" for r in rows if r["wrong"]
    ]
    scaled = "real sizes" if params.scale == 1 else f"sizes x{params.scale:g} (tensors and caps)"
    title = (
        f"gradient all-reduce, {params.source}: {r0['num_tensors']} tensors, "
        f"{format_size(r0['total_bytes'])} float32 per rank, {scaled}; {n} ranks, {params.algorithm}; "
        f"slowest rank, median of {params.iters}"
    )
    notes = []
    ab = r0["alpha_beta"]
    if ab:
        notes.append(
            f"alpha-beta from ping-pong rank 0 <-> 1: alpha = {ab['alpha_s'] * 1e6:.1f} us, "
            f"beta = {ab['beta_bytes_per_s'] / 1e9:.3f} GB/s (n_1/2 = "
            f"{format_size(int(ab['alpha_s'] * ab['beta_bytes_per_s']))})"
        )
        abl = r0["alpha_beta_loaded"]
        notes.append(
            f"the same ping-pong with every pair of ranks talking at once (as in a ring): alpha = "
            f"{abl['alpha_s'] * 1e6:.1f} us, beta = {abl['beta_bytes_per_s'] / 1e9:.3f} GB/s "
            "(column 'model, loaded link')"
        )
        notes.append(
            f"model: {params.algorithm} all-reduce of S bytes = "
            + (
                "2(N-1)(alpha + S/(N beta))"
                if params.algorithm == "ring"
                else "2 ceil(log2 N)(alpha + S/beta)"
            )
            + ", summed over the schedule's all-reduces"
        )
    else:
        notes.append("one rank: nothing is sent, so there is no alpha-beta fit and the model predicts 0")
    cores = os.cpu_count() or 1
    notes.append(
        f"machine load average (1 min) when the run ended: {os.getloadavg()[0]:.1f} on {cores} cores "
        "(other users' work inflates and scatters the times)"
    )
    if n > cores:
        notes.append(
            f"{n} ranks on {cores} cores: oversubscribed, so ranks time-share the CPUs and measured "
            "times include waiting for a core"
        )
    files = []
    if plot_sweep(rows, run_dir / "buckets.png"):
        files.append("buckets.png")
        notes.append(f"plot: {run_dir / 'buckets.png'}")
    return Report(
        ok=not failures and all(r.get("ok", False) for r in results),
        tables=[Table(title, rows, COLUMNS)],
        notes=notes,
        failures=failures,
        files=files,
        data={"alpha_beta": ab, "algorithm": params.algorithm},
    )
