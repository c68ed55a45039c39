"""One training step's backward and gradient all-reduce, serial or overlapped: the overlap lab's
timed loop.

Backward does real CPU work per layer (`Burner`, a numpy ufunc that releases the GIL) and writes
the layer's gradient. Serial: every layer, then every bucket's all-reduce on this thread.
Overlap: each bucket goes to the communication thread as soon as its last layer is written,
while this thread computes the next layers (DDP's hooks). Either way a bucket's all-reduce is the
one traced call (`allreduce_bucket`); every span carries its setting, mode and step, so the report
can find in the trace when compute and all-reduce overlapped.
"""

import time

import numpy as np

from playground.buckets.compute import Burner
from playground.buckets.gradients import expected_sum
from playground.collectives.comm_thread import allreduce_bucket

MODES = ("serial", "overlap")


def backward_layer(burner: Burner, units: int, base: np.ndarray, grad: np.ndarray, rank: int) -> None:
    """One layer of backward: the compute, then its gradient (rank's share of the exact sum)."""
    burner.burn(units)
    np.multiply(base, np.float32(rank + 1), out=grad)


def run_step(comm, mode: str, s, step: int, ctx: dict) -> dict:
    """One timed step of setting `s` (its name and number of layers) in `mode`: returns per-layer
    compute and per-bucket all-reduce seconds, and the wrong elements of its results (also added to
    `ctx["tally"]`, which keeps the first). `ctx` holds the step's buffers (base, grads,
    layer_elems), buckets and their views, the burner and its units per layer, the algorithm, the
    tally, and in overlap mode the `CommThread`."""
    tracer, buckets, views = comm.tracer, ctx["buckets"], ctx["views"]
    grads, base, layer_elems = ctx["grads"], ctx["base"], ctx["layer_elems"]
    grads[:] = 0
    ready_after = {b.last: b.index for b in buckets}
    compute_s, outs = [], {}
    comm.barrier()
    t0 = time.perf_counter()
    with tracer.span("step", cat="phase", setting=s.name, mode=mode, step=step):
        for layer in range(s.layers):
            sl = slice(layer * layer_elems, (layer + 1) * layer_elems)
            c0 = time.perf_counter()
            with tracer.span(
                "backward.layer", cat="compute", layer=layer, setting=s.name, mode=mode, step=step
            ):
                backward_layer(ctx["burner"], ctx["units"], base[sl], grads[sl], comm.rank)
            compute_s.append(time.perf_counter() - c0)
            if mode == "overlap" and layer in ready_after:
                ctx["thread"].submit(ready_after[layer], step)
        if mode == "overlap":
            outs = ctx["thread"].wait_step(len(buckets), 4 * comm.timeout_s)
        else:
            for b in buckets:
                m0 = time.perf_counter()
                out = allreduce_bucket(
                    comm, views[b.index], b.index, step, ctx["algorithm"], setting=s.name, mode=mode
                )
                outs[b.index] = (out, time.perf_counter() - m0)
    step_s = time.perf_counter() - t0
    wrong = sum(
        ctx["tally"].check(
            outs[b.index][0], expected_sum(views[b.index], comm.rank, comm.size), step, bucket=b.index
        )
        for b in buckets
    )
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
