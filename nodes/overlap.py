"""Backward compute and gradient all-reduce: one after the other, or overlapped on two threads.

Each setting is a model of `layers` layers; backward does real CPU work per layer (a numpy ufunc
that releases the GIL, sized in milliseconds by a calibration at start) and writes that layer's
gradient. Layers are grouped into buckets (one per layer unless `bucket_mb` is set).
(a) serial: compute every layer, then all-reduce every bucket.
(b) overlap: a communication thread all-reduces each bucket as soon as its last layer is done,
    while the main thread computes the next layers (DDP's hooks; lecture P4 section 3.5).
The model beside each mode uses the serial mode's own per-bucket compute and all-reduce times:
their sum for (a), the two-stage pipeline for (b). Results are checked against numpy exactly.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from playground.buckets import overlap_report
from playground.buckets.backward import MODES, calibrate, run_step
from playground.buckets.compute import Burner
from playground.buckets.gradients import make_base
from playground.collectives import registry
from playground.collectives.bucketing import MIB, Bucket, plan_buckets
from playground.collectives.check import Tally
from playground.collectives.comm_thread import CommThread
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.core.sizes import Size
from playground.display.report import Report

ITEMSIZE = 4
Algorithm = registry.FlatAllreduceName


@dataclass(frozen=True)
class Setting:
    name: str = "custom"  # the setting's label in the report and the trace
    layers: int = 16  # layers of the model, each with one gradient of layer_bytes
    layer_bytes: Size = 1 * MIB  # gradient bytes of each layer
    compute_ms: float = 10.0  # backward compute of each layer, ms of real CPU work (0: none)
    # layers packed into buckets of at most this many MiB (a larger layer alone); null: one bucket
    # per layer (the lecture's chunks)
    bucket_mb: float | None = None

    def __post_init__(self):
        if self.layers < 1:
            raise ParamError("layers", f"must be >= 1, got {self.layers}")
        if self.layer_bytes < ITEMSIZE or self.layer_bytes % ITEMSIZE:
            raise ParamError(
                "layer_bytes", f"must be a positive multiple of {ITEMSIZE} bytes, got {self.layer_bytes}"
            )
        if self.compute_ms < 0:
            raise ParamError("compute_ms", f"must be >= 0, got {self.compute_ms}")
        if self.bucket_mb is not None and self.bucket_mb <= 0:
            raise ParamError("bucket_mb", f"must be > 0 MiB or null, got {self.bucket_mb}")

    def buckets(self) -> list[Bucket]:
        cap = 0 if self.bucket_mb is None else round(self.bucket_mb * MIB)  # 0: one bucket per layer
        return plan_buckets([int(self.layer_bytes)] * self.layers, cap)


@dataclass(frozen=True)
class Params:
    # the models measured, each in both modes (serial, then overlap); keys below
    settings: tuple[Setting, ...] = (
        Setting("compute-bound", 16, 1 * MIB, 12.0),
        Setting("comm-bound", 16, 4 * MIB, 3.0),
    )
    algorithm: Algorithm = "ring"  # the all-reduce algorithm of every bucket
    iters: int = 3  # timed steps per setting and mode
    warmup: int = 1  # untimed steps before them (their results are checked too)
    seed: int = 0  # seed of the gradient values (exactly checkable integers); timings do not depend on it

    def __post_init__(self):
        if not self.settings:
            raise ParamError("settings", "give at least one {name, layers, layer_bytes, compute_ms}")
        if self.iters < 1:
            raise ParamError("iters", f"must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")


def main(comm, params: Params) -> dict:
    burner = Burner()
    units_per_ms = calibrate(comm, burner)
    steps_total = len(params.settings) * len(MODES) * (params.warmup + params.iters)
    done = 0
    out: list[dict] = []
    for si, s in enumerate(params.settings):
        layer_elems = int(s.layer_bytes) // ITEMSIZE
        base = make_base(layer_elems * s.layers, params.seed + si)
        grads = np.zeros_like(base)
        buckets = s.buckets()
        views = [b.view(grads) for b in buckets]
        ctx: dict[str, Any] = {  # the step's buffers and helpers (buckets.backward.run_step)
            "burner": burner,
            "units": round(s.compute_ms * units_per_ms),
            "base": base,
            "grads": grads,
            "layer_elems": layer_elems,
            "buckets": buckets,
            "views": views,
            "algorithm": params.algorithm,
        }
        per_mode: dict[str, list[dict]] = {}
        checked: dict[str, Tally] = {}
        for mode in MODES:
            if mode == "overlap":
                ctx["thread"] = CommThread(comm, views, params.algorithm, {"setting": s.name, "mode": mode})
            steps = []
            ctx["tally"] = checked[mode] = Tally(warmup=params.warmup)  # warm-up steps are checked too
            try:
                for it in range(params.warmup + params.iters):
                    comm.progress(done, steps_total, f"{s.name} {mode}")
                    res = run_step(comm, mode, s, it, ctx)
                    done += 1
                    if it >= params.warmup:
                        steps.append(res)
            finally:
                if mode == "overlap":
                    ctx.pop("thread").close()
            per_mode[mode] = steps
        out.append(
            {
                "setting": s.name,
                "num_buckets": len(buckets),
                "bucket_bytes": [b.num_bytes for b in buckets],
                "modes": per_mode,
                "checked": {mode: tally.record() for mode, tally in checked.items()},
            }
        )
    comm.progress(done, steps_total, "done")
    wrong = sum(c["wrong"] for r in out for c in r["checked"].values())
    return {"ok": wrong == 0, "settings": out, "units_per_ms": units_per_ms, "wrong": wrong}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return overlap_report.report(results, params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    threaded=True,  # a communication thread beside the compute
)
