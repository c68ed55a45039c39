"""Per-tensor vs bucketed vs single-bucket gradient all-reduce, measured beside the alpha-beta model.

Every rank holds the gradients of a model (real tensor sizes, backward order) in one flat
float32 buffer, so a bucket is a view of consecutive tensors, as with DDP's
`gradient_as_bucket_view`. Each strategy all-reduces the same data: one all-reduce per tensor,
DDP-style buckets under a cap (first bucket 1 MiB), or one bucket. A quick ping-pong at the
start measures alpha and beta; the model predicts each schedule as the sum of its all-reduces.
Every result is checked bit for bit against numpy on every rank (see buckets.gradients).
"""

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.buckets import buckets_report
from playground.buckets.architectures import gradient_elements
from playground.buckets.gradients import expected_sum, make_base, rank_gradient
from playground.buckets.schedules import schedules
from playground.collectives import registry
from playground.collectives.bucketing import Bucket
from playground.collectives.check import Tally
from playground.collectives.comm_thread import allreduce_bucket
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.core.sizes import Size
from playground.display.report import Report
from playground.models.pingpong import measure_alpha_beta

ITEMSIZE = 4  # float32 gradients
Strategy = Literal["per_tensor", "bucketed", "single"]
Algorithm = registry.FlatAllreduceName


@dataclass(frozen=True)
class Params:
    # the architecture whose gradients are all-reduced (float32, in backward order): lecture (1000
    # tensors of 100 KB), resnet50 (torchvision's: 161 tensors, 97.5 MiB), gpt2 (Hugging Face's
    # GPT-2 small: 148 tensors, 475 MiB)
    architecture: Literal["lecture", "resnet50", "gpt2"] = "lecture"
    tensor_bytes: tuple[Size, ...] | None = None  # a custom list (backward order); replaces `architecture`
    scale: float = 1.0  # every tensor (and cap) x scale, to keep runs short; 1.0 = real sizes
    bucket_mb: tuple[float, ...] = (25.0,)  # caps in MiB (DDP's bucket_cap_mb); several = a sweep
    first_bucket_mb: float | None = 1.0  # DDP's smaller first bucket; null = same as the cap
    # per_tensor: one all-reduce per gradient; bucketed: DDP's buckets, once per cap of bucket_mb;
    # single: one all-reduce of everything
    strategies: tuple[Strategy, ...] = ("per_tensor", "bucketed", "single")
    algorithm: Algorithm = "ring"  # the all-reduce algorithm of every bucket
    iters: int = 3  # timed passes over all gradients per strategy (and cap)
    warmup: int = 1  # untimed passes before them (their results are checked too)
    seed: int = 0  # seed of the gradient values (exactly checkable integers); timings do not depend on it

    def __post_init__(self):
        if self.tensor_bytes is not None:
            if not self.tensor_bytes:
                raise ParamError(
                    "tensor_bytes",
                    "empty list; give the gradient sizes in backward order, or remove the key to use `architecture`",
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
        return f"custom list of {len(self.tensor_bytes)} tensors" if self.tensor_bytes else self.architecture


def run_schedule(comm, grads: np.ndarray, buckets: list[Bucket], p: Params, tick) -> dict:
    """Warm-up, then `iters` timed passes; every pass's results, warm-up included, are checked
    after its timing."""
    times_s, sent_bytes, tally = [], 0, Tally(warmup=p.warmup)
    views = [b.view(grads) for b in buckets]
    for it in range(p.warmup + p.iters):
        comm.barrier()
        sent0 = comm.bytes_sent
        t0 = time.perf_counter()
        with comm.tracer.span("schedule", cat="phase", buckets=len(buckets), step=it):
            outs = [
                allreduce_bucket(comm, view, b.index, it, p.algorithm)
                for b, view in zip(buckets, views, strict=True)
            ]
        dt = time.perf_counter() - t0
        if it >= p.warmup:
            times_s.append(dt)
            sent_bytes = comm.bytes_sent - sent0
        for b, out, view in zip(buckets, outs, views, strict=True):
            tally.check(out, expected_sum(view, comm.rank, comm.size), it, bucket=b.index)
        del outs
        comm.tracer.flush()
        tick()
    return {"times_s": times_s, "sent_bytes": sent_bytes, **tally.record()}


def main(comm, params: Params) -> dict:
    fit, points = measure_alpha_beta(comm)
    loaded, _ = measure_alpha_beta(comm, loaded=True) if comm.size > 2 else (fit, points)
    elems = gradient_elements(params.architecture, params.tensor_bytes, params.scale, ITEMSIZE)
    grads = rank_gradient(make_base(sum(elems), params.seed), comm.rank)
    tensor_bytes = [n * ITEMSIZE for n in elems]
    plan = schedules(params.strategies, tensor_bytes, params.bucket_mb, params.first_bucket_mb, params.scale)
    total = len(plan) * (params.warmup + params.iters)
    done = 0
    rows = []
    for label, cap_mb, buckets in plan:

        def tick(label=label):
            nonlocal done
            done += 1
            comm.progress(done, total, label)

        comm.progress(done, total, label)
        res = run_schedule(comm, grads, buckets, params, tick)
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
        "total_bytes": grads.nbytes,
        "alpha_beta": None
        if fit is None
        else {"alpha_s": fit.alpha_s, "beta_bytes_per_s": fit.beta_bytes_per_s, "points": points},
        "alpha_beta_loaded": None
        if loaded is None
        else {"alpha_s": loaded.alpha_s, "beta_bytes_per_s": loaded.beta_bytes_per_s},
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return buckets_report.report(results, params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    threaded=True,  # a communication thread beside the compute
)
