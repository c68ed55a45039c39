"""The timing loop both baseline workers run, so Gloo and MPI are measured exactly alike.

Per size and per form the library offers, out of place then in place (nccl-tests' two column
sets): warm-up iterations, then timed iterations, each timed on its own with a barrier before it
(outside the timed span) so every rank starts together and a slow rank shows in its own time rather
than in the next iteration's. Each rank keeps the median of its times; the parent takes the max
over ranks. The input is restored before each iteration (also untimed) because the in-place form
overwrites it. Every iteration's output, warm-up included, is checked against the closed form
after its timing and once every rank's timed call is over, as our own bench checks (`check.Tally`),
so ours and theirs count alike.

A backend's `prepare(lay, op, inp, inplace)` returns None for a form its library does not offer
(torch's all_reduce has no out-of-place form, MPI_Bcast no in-place one to tell apart): that
form's columns stay empty rather than being filled with the other form's figure.

Results go to `rank-<r>.jsonl` in the run's directory, one JSON line per size (`playground.launcher.procs`):
the out-of-place figures as `median_us`, `wrong`, ..., the in-place ones with the prefix `ip_`.
"""

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from playground.baselines import common
from playground.collectives.check import Tally
from playground.launcher.procs import rank_file, write_record

FORMS = (("", False), ("ip_", True))  # (record prefix, in place): nccl-tests' order


@dataclass
class Call:
    """One prepared collective: `reset` restores its buffers, `run` is the timed part, `result` reads the
    output (None where the collective defines none: reduce on a rank other than the root, as ours)."""

    reset: Callable[[], object]
    run: Callable[[], object]
    result: Callable[[], np.ndarray | None]


class Backend(Protocol):
    rank: int
    nranks: int

    def barrier(self) -> None: ...

    def prepare(self, lay: common.Layout, op: str, inp: np.ndarray, inplace: bool) -> Call | None: ...


def parse_worker_args(description: str, argv: list[str] | None) -> tuple[dict, Path]:
    """(spec, out dir) from a worker's command line: both kinds of worker take the same two flags."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "--spec", required=True, help="JSON: collective, sizes, dtype, op, iters, warmup, timeout_s"
    )
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    return json.loads(args.spec), args.out


def measure(backend: Backend, spec: dict, out_dir: Path) -> None:
    """Run every size of `spec`, in every form the backend offers, and append one record per size
    to this rank's file."""
    rank, n = backend.rank, backend.nranks
    dtype, op = spec["dtype"], spec["op"]
    with open(rank_file(out_dir, rank), "a") as f:
        for lay in common.layouts(spec["collective"], spec["sizes"], n, dtype):
            write_record(f, {"rank": rank, "size": lay.size_bytes, "phase": "start"})
            inp = common.pattern(rank, lay.in_count, dtype)
            want = common.expected(lay, rank, op, dtype)
            record = {"rank": rank, "size": lay.size_bytes}
            for prefix, inplace in FORMS:
                call = backend.prepare(lay, op, inp, inplace)
                if call is not None:
                    record.update(_timed(backend, call, want, spec["warmup"], spec["iters"], prefix))
            write_record(f, record)


def _timed(backend: Backend, call: Call, want, warmup: int, iters: int, prefix: str) -> dict:
    tally = Tally(warmup=warmup)
    times_ns = []
    for it in range(warmup + iters):
        call.reset()
        backend.barrier()
        t0 = time.perf_counter_ns()
        call.run()
        dt = time.perf_counter_ns() - t0
        if it >= warmup:
            times_ns.append(dt)
            backend.barrier()  # as ours (collectives/measure.py): no check beside a timed call
        tally.check(call.result(), want, it)
    return {
        prefix + "median_us": common.median_us(times_ns),
        prefix + "min_us": min(times_ns) / 1000,
        prefix + "max_us": max(times_ns) / 1000,
        **tally.record(prefix),
    }
