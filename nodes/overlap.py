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

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from playground.buckets.bucketing import MIB, Bucket, assign_buckets, per_tensor
from playground.buckets.comm_thread import CommThread
from playground.buckets.compute import Burner
from playground.buckets.gradients import count_wrong, make_base
from playground.buckets.overlap import StepTimes, intersection_s, pipeline_step_s, serial_step_s
from playground.collectives import allreduce
from playground.errors import ParamError
from playground.report import Report, Table
from playground.sizes import Size, format_size
from playground.trace import read_events

ITEMSIZE = 4
MODES = ("serial", "overlap")


@dataclass(frozen=True)
class Setting:
    name: str = "custom"
    layers: int = 16
    layer_bytes: Size = 1 * MIB  # gradient bytes of each layer
    compute_ms: float = 10.0  # backward compute of each layer
    bucket_mb: float | None = None  # None: one bucket per layer (the lecture's chunks)

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
        sizes = [int(self.layer_bytes)] * self.layers
        return (
            per_tensor(sizes)
            if self.bucket_mb is None
            else assign_buckets(sizes, round(self.bucket_mb * MIB))
        )


@dataclass(frozen=True)
class Params:
    settings: tuple[Setting, ...] = (
        Setting("compute-bound", 16, 1 * MIB, 12.0),
        Setting("comm-bound", 16, 4 * MIB, 3.0),
    )
    algorithm: Literal["ring", "tree"] = "ring"
    iters: int = 3
    warmup: int = 1
    seed: int = 0

    def __post_init__(self):
        if not self.settings:
            raise ParamError("settings", "give at least one {name, layers, layer_bytes, compute_ms}")
        if self.iters < 1:
            raise ParamError("iters", f"must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")


def backward_layer(burner: Burner, units: int, base: np.ndarray, grad: np.ndarray, rank: int) -> None:
    """One layer of backward: the compute, then its gradient (rank's share of the exact sum)."""
    burner.burn(units)
    np.multiply(base, np.float32(rank + 1), out=grad)


def run_step(comm, mode: str, s: Setting, it: int, ctx: dict) -> dict:
    """One timed step; returns per-layer compute and per-bucket all-reduce seconds, and checks."""
    tracer, buckets, views = comm.tracer, ctx["buckets"], ctx["views"]
    grads, base, layer_elems = ctx["grads"], ctx["base"], ctx["layer_elems"]
    grads[:] = 0
    ready_after = {b.last: b.index for b in buckets}
    compute_s, outs = [], {}
    comm.barrier()
    t0 = time.perf_counter()
    with tracer.span("step", cat="phase", setting=s.name, mode=mode, iter=it):
        for layer in range(s.layers):
            sl = slice(layer * layer_elems, (layer + 1) * layer_elems)
            c0 = time.perf_counter()
            with tracer.span(
                "backward.layer", cat="compute", layer=layer, setting=s.name, mode=mode, iter=it
            ):
                backward_layer(ctx["burner"], ctx["units"], base[sl], grads[sl], comm.rank)
            compute_s.append(time.perf_counter() - c0)
            if mode == "overlap" and layer in ready_after:
                ctx["thread"].submit(ready_after[layer], it)
        if mode == "overlap":
            outs = ctx["thread"].wait_step(len(buckets), 4 * comm.timeout_s)
        else:
            for b in buckets:
                m0 = time.perf_counter()
                with tracer.span(
                    "bucket.allreduce",
                    cat="op",
                    bucket=b.index,
                    iter=it,
                    bytes=b.num_bytes,
                    setting=s.name,
                    mode=mode,
                ):
                    out = allreduce(comm, views[b.index], algorithm=ctx["algorithm"])
                outs[b.index] = (out, time.perf_counter() - m0)
    step_s = time.perf_counter() - t0
    wrong = sum(count_wrong(outs[b.index][0], views[b.index], comm.rank, comm.size) for b in buckets)
    tracer.flush()
    return {
        "step_s": step_s,
        "compute_s": compute_s,
        "comm_s": [outs[b.index][1] for b in buckets],
        "wrong": wrong,
    }


def calibrate(comm, burner: Burner, round_ms: float = 300.0) -> float:
    """Units per ms with every rank computing at once, as in the run; agreed by median."""
    quick = float(np.median(comm.allgather_obj(burner.estimate_units_per_ms())))
    comm.barrier()
    with comm.tracer.span("calibrate", cat="compute"):
        mine = burner.measure_units_per_ms(max(1, round(quick * round_ms)))
    return float(np.median(comm.allgather_obj(mine)))


def main(comm, params: Params) -> dict:
    burner = Burner()
    units_per_ms = calibrate(comm, burner)
    steps_total = len(params.settings) * len(MODES) * (params.warmup + params.iters)
    done = 0
    out = []
    for si, s in enumerate(params.settings):
        layer_elems = int(s.layer_bytes) // ITEMSIZE
        base = make_base(layer_elems * s.layers, params.seed + si)
        grads = np.zeros_like(base)
        buckets = s.buckets()
        views = [grads[b.first * layer_elems : (b.last + 1) * layer_elems] for b in buckets]
        ctx = {
            "burner": burner,
            "units": round(s.compute_ms * units_per_ms),
            "base": base,
            "grads": grads,
            "layer_elems": layer_elems,
            "buckets": buckets,
            "views": views,
            "algorithm": params.algorithm,
        }
        per_mode = {}
        for mode in MODES:
            if mode == "overlap":
                ctx["thread"] = CommThread(comm, views, params.algorithm, {"setting": s.name, "mode": mode})
            steps = []
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
            }
        )
    comm.progress(done, steps_total, "done")
    wrong = sum(st["wrong"] for r in out for steps in r["modes"].values() for st in steps)
    return {"ok": wrong == 0, "settings": out, "units_per_ms": units_per_ms, "wrong": wrong}


COLUMNS = {
    "setting": "setting",
    "mode": "mode",
    "step_ms": "step (ms)",
    "compute_ms": "compute (ms)",
    "comm_ms": "comm (ms)",
    "exposed_ms": "exposed comm (ms)",
    "hidden_ms": "hidden comm (ms)",
    "efficiency_pct": "overlap eff. (%)",
    "model_ms": "model step (ms)",
    "speedup": "speedup vs serial",
    "wrong": "#wrong",
}


def _slowest(results: list[dict], si: int, mode: str, i: int) -> dict:
    return max((res["settings"][si]["modes"][mode][i] for res in results), key=lambda st: st["step_s"])


def traced_overlap_s(run_dir: Path, setting: str, num_ranks: int, warmup: int) -> float:
    """Seconds per step and rank during which the trace shows a compute span on the main thread
    and an all-reduce span on another thread at once, over the timed overlap-mode steps."""
    total, steps = 0.0, set()
    for r in range(num_ranks):
        path = Path(run_dir) / f"rank-{r}.jsonl"
        if not path.exists():
            continue
        compute, comm = [], []
        for e in read_events(path):
            a = e.get("args") or {}
            if a.get("setting") != setting or a.get("mode") != "overlap" or a.get("iter", 0) < warmup:
                continue
            span = (e["ts"], e["ts"] + e["dur"])
            if e["name"] == "backward.layer" and e.get("tid", 0) == 0:
                compute.append(span)
            elif e["name"] == "bucket.allreduce" and e.get("tid", 0) != 0:
                comm.append(span)
                steps.add((r, a["iter"]))
        total += intersection_s(compute, comm) / 1e6
    return total / len(steps) if steps else 0.0


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    n = len(results)
    rows, notes, failures, traced_ms = [], [], [], {}
    for si, s in enumerate(params.settings):
        per_mode = {}
        for mode in MODES:
            picks = [_slowest(results, si, mode, i) for i in range(params.iters)]
            per_mode[mode] = sorted(picks, key=lambda st: st["step_s"])[len(picks) // 2]
        serial = per_mode["serial"]
        bucket_compute = _compute_per_bucket(serial["compute_s"], s.buckets())
        model = {
            "serial": serial_step_s(bucket_compute, serial["comm_s"]),
            "overlap": pipeline_step_s(bucket_compute, serial["comm_s"]),
        }
        for mode in MODES:
            st = per_mode[mode]
            t = StepTimes(st["step_s"], sum(st["compute_s"]), sum(st["comm_s"]))
            wrong = sum(x["wrong"] for res in results for x in res["settings"][si]["modes"][mode])
            rows.append(
                {
                    "setting": s.name,
                    "mode": mode,
                    "step_ms": t.step_s * 1e3,
                    "compute_ms": t.compute_s * 1e3,
                    "comm_ms": t.comm_s * 1e3,
                    "exposed_ms": t.exposed_comm_s * 1e3,
                    "hidden_ms": t.hidden_comm_s * 1e3,
                    "efficiency_pct": 100 * t.overlap_efficiency,
                    "model_ms": model[mode] * 1e3,
                    "speedup": serial["step_s"] / t.step_s,
                    "wrong": wrong,
                }
            )
            if wrong:
                failures.append(f"{s.name} {mode}: {wrong} wrong elements (summed over ranks and steps)")
        seen = traced_overlap_s(Path(run_dir), s.name, n, params.warmup)
        traced_ms[s.name] = seen * 1e3
        ov = rows[-1]
        notes.append(
            f"{s.name}: {s.layers} layers x {format_size(int(s.layer_bytes))} gradients, "
            f"{s.compute_ms:g} ms compute each, {len(s.buckets())} buckets; overlap hid "
            f"{ov['hidden_ms']:.1f} of {ov['comm_ms']:.1f} ms of communication "
            f"({ov['efficiency_pct']:.0f}%), step {ov['speedup']:.2f}x faster than serial; the trace shows "
            f"compute and all-reduce running at once for {seen * 1e3:.1f} ms per step and rank"
        )
    notes.append(
        "rows: the slowest rank's step (median of the timed steps); exposed = step - compute, "
        "hidden = compute + comm - step, efficiency = hidden / comm; model: serial = sum of the serial "
        "mode's per-bucket compute and all-reduce times, overlap = the same times as a two-stage pipeline"
    )
    cores = os.cpu_count() or 1
    notes.append(
        f"machine load average (1 min) when the run ended: {os.getloadavg()[0]:.1f} on {cores} cores "
        "(other users' work inflates and scatters the times)"
    )
    if 2 * n > cores:
        notes.append(
            f"{n} ranks x 2 threads on {cores} cores: oversubscribed; in overlap mode the all-reduce "
            "competes with compute for CPU (here no NIC or copy engine moves the data), so compute "
            "spans stretch and the hidden share is lower than on a machine with spare cores"
        )
    notes.append(
        f"compute calibration: {results[0]['units_per_ms']:.1f} np.sin passes over 64 KiB per ms "
        "(median over ranks, measured with every rank computing)"
    )
    return Report(
        ok=not failures and all(r.get("ok", False) for r in results),
        tables=[
            Table(
                f"backward + gradient all-reduce, {n} ranks, {params.algorithm}: serial vs overlapped",
                rows,
                COLUMNS,
            )
        ],
        notes=notes,
        failures=failures,
        data={"traced_overlap_ms_per_step": traced_ms, "units_per_ms": results[0]["units_per_ms"]},
    )


def _compute_per_bucket(layer_compute_s: list[float], buckets: list[Bucket]) -> list[float]:
    """Compute time between one bucket becoming ready and the next."""
    return [sum(layer_compute_s[i] for i in b.tensor_indices) for b in buckets]
