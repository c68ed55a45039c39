"""A real lost update (lecture 3.4): processes incrementing one counter in shared memory.

Each of `num_procs` forked processes does `increments` times: read x from shared memory, add 1,
write it back -- three steps, like `x += 1`. Variants, each timed:

- no lock: the processes run at once on the 2 cores (or are preempted between read and write),
  so some writes overwrite others' increments: final < expected, the difference is lost updates;
- lock: the read-add-write is a critical section under a multiprocessing.Lock (a POSIX semaphore);
- atomic (kernel): each increment is one write(2) of one byte to a file opened with O_APPEND;
  the kernel advances the end-of-file offset and writes in one indivisible step, so the file
  size is a counter updated by a real atomic fetch-and-add. (A CPU atomic such as
  __atomic_fetch_add needs C; pure Python has none.)
- sharded: each process counts privately and writes its total once at the end; nothing is
  shared while counting, so nothing can be lost (how per-CPU counters avoid atomics).

Beside them, the exhaustive interleavings of the read/add/write steps (20 and 924 orders).
"""

import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Literal, get_args

from playground.concurrency import race_report
from playground.concurrency.interleavings import describe, lecture_rows
from playground.config.node import NodeContract
from playground.core.errors import LabError, ParamError
from playground.core.machine import load_note
from playground.display.report import Report

Variant = Literal["no lock", "lock", "atomic (kernel O_APPEND)", "sharded"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)


@dataclass(frozen=True)
class Params:
    num_procs: int = 4  # forked processes incrementing the one counter at once (2-64)
    increments: int = 100_000  # increments each process makes
    # run in this order, any of: "no lock" (read, add, write), "lock" (under a multiprocessing.Lock),
    # "atomic (kernel O_APPEND)" (a one-byte write(2) to an O_APPEND file), "sharded" (private counts, summed)
    variants: tuple[Variant, ...] = VARIANTS

    def __post_init__(self):
        if not 2 <= self.num_procs <= 64:
            raise ParamError("num_procs", f"must be in 2..64, got {self.num_procs}")
        if not 1 <= self.increments <= 10_000_000:
            raise ParamError("increments", f"must be in 1..10000000, got {self.increments}")
        if not self.variants:
            raise ParamError("variants", f"give at least one of {', '.join(VARIANTS)}")


def _no_lock(counter, start, n: int) -> None:
    start.wait()
    for _ in range(n):
        x = counter.value  # read
        x = x + 1  # add
        counter.value = x  # write


def _with_lock(counter, lock, start, n: int) -> None:
    start.wait()
    for _ in range(n):
        with lock:
            x = counter.value
            counter.value = x + 1


def _atomic_append(path: str, start, n: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    one = b"\x01"
    start.wait()
    try:
        for _ in range(n):
            os.write(fd, one)
    finally:
        os.close(fd)


def _sharded(slots, index: int, start, n: int) -> None:
    start.wait()
    local = 0
    for _ in range(n):
        local += 1
    slots[index] = local


def run_variant(variant: str, num_procs: int, n: int) -> dict:
    """Start `num_procs` processes, release them together, and count what reached the counter."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(num_procs + 1)  # released when every process is ready, so they really race
    tmp = ""  # the atomic variant's file
    if variant == "no lock":
        counter = ctx.RawValue("q", 0)
        procs = [ctx.Process(target=_no_lock, args=(counter, start, n)) for _ in range(num_procs)]
    elif variant == "lock":
        counter, lock = ctx.RawValue("q", 0), ctx.Lock()
        procs = [ctx.Process(target=_with_lock, args=(counter, lock, start, n)) for _ in range(num_procs)]
    elif variant == "sharded":
        slots = ctx.RawArray("q", num_procs)
        procs = [ctx.Process(target=_sharded, args=(slots, i, start, n)) for i in range(num_procs)]
    else:
        fd, tmp = tempfile.mkstemp(prefix="race-", suffix=".count")
        os.close(fd)
        procs = [ctx.Process(target=_atomic_append, args=(tmp, start, n)) for _ in range(num_procs)]
    for p in procs:
        p.start()
    start.wait(timeout=30)
    t0 = time.perf_counter()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    if any(p.exitcode != 0 for p in procs):
        raise LabError(f"{variant}: a process failed, exit codes {[p.exitcode for p in procs]}", step=variant)
    if variant in ("no lock", "lock"):
        final = counter.value
    elif variant == "sharded":
        final = sum(slots)
    else:
        final = os.path.getsize(tmp)
        os.unlink(tmp)
    expected = num_procs * n
    return {
        "variant": variant,
        "expected": expected,
        "final": final,
        "lost": expected - final,
        "lost_pct": 100 * (expected - final) / expected,
        "time_s": wall,
        "ns_per_increment": 1e9 * wall / expected,
    }


def main(comm, params: Params) -> dict:
    if comm.rank != 0:
        return {"ok": True}
    rows = []
    for k, variant in enumerate(params.variants):
        comm.progress(k, len(params.variants) + 1, variant)
        rows.append(run_variant(variant, params.num_procs, params.increments))
    comm.progress(len(params.variants), len(params.variants) + 1, "interleavings")
    inter = lecture_rows()
    return {
        "ok": True,
        "rows": rows,
        "interleavings": inter,
        "machine": load_note(),
        "example": describe((0, 1, 0, 0, 1, 1), 2),
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return race_report.report(results[0], params)


CONTRACT = NodeContract(Params, summarize)
