"""What `calibrate` measures of the machine itself, apart from any transport: how fast one core and
all cores together copy and reduce at a range of buffer sizes, and how long the scheduler lets a
process run before another that waits for its core gets it (the time slice).

Copies and reductions are timed as `bench copy` times them (copybw.py): numpy's `copyto` (what the
transports copy with) and `np.add(a, b, out=c)` (the reduction), each in 1 and in `cores` forked
processes at once, each pinned to a core of its own, best of `iters`; a rate is bytes copied (for the
reduction: of one operand) per second. Sizes span the caches: a collective's messages are copied in
and out of buffers that, all ranks together, are far larger than one message, so its rate is the
rate at that footprint (models/calibration.py), not at the message's size.

The time slice: two processes pinned to one core each spin on the clock; a jump of more than 30 us
is the other one's turn. The median run between jumps is the slice (4 ms at HZ=250 with two tasks).

The wake-up: two processes pass a byte back and forth through pipes, each asleep in read() while
the other works. On one core a round trip is two context switches (about 3 us here); across two
cores each wake-up also has to wake the other core, idle meanwhile (about 50 us here: on a VM an
idle vCPU halts, and waking it goes through the hypervisor). Half the difference is what a rank that
slept costs when it wakes on an idle core.
"""

import os
import statistics
import time

from playground.commands.copybw import measure
from playground.models.hostfit import DEFAULT_MIGRATION_COST_S

GAP_S = 30e-6  # a jump of the clock longer than this is another process's turn on the core


def rate_curve(sizes_bytes: list[int], cores: int, iters: int, progress=None) -> list[dict]:
    """One row per size: GB/s of copy and add, on one core and on `cores` at once (their sum)."""
    rows = []
    for k, size in enumerate(sizes_bytes):
        if progress:
            progress(k, len(sizes_bytes), f"copy and add at {size >> 10} KiB")
        row: dict[str, float] = {"bytes": size}
        for key, kind in (("copy", "numpy copy"), ("add", "numpy add")):
            row[f"{key}_one_gbps"] = measure(kind, size, 1, iters)[0]
            row[f"{key}_all_gbps"] = (
                sum(measure(kind, size, cores, iters)) if cores > 1 else row[f"{key}_one_gbps"]
            )
        rows.append(row)
    return rows


def _pipe_round_trips(cores: tuple[int, int], reps: int) -> float:
    """Median round trip of a byte through two pipes between this process on cores[0] and a child on
    cores[1]."""
    there_r, there_w = os.pipe()
    back_r, back_w = os.pipe()
    allowed = os.sched_getaffinity(0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.sched_setaffinity(0, {cores[1]})
            for _ in range(reps + 1):
                os.read(there_r, 1)
                os.write(back_w, b"x")
            code = 0
        finally:
            os._exit(code)
    times = []
    try:
        os.sched_setaffinity(0, {cores[0]})
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            os.write(there_w, b"x")
            os.read(back_r, 1)
            times.append(time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, allowed)
        os.waitpid(pid, 0)
        for fd in (there_r, there_w, back_r, back_w):
            os.close(fd)
    return statistics.median(times[1:])


def wake_up_s(reps: int = 500) -> float:
    """What waking a sleeping process on an idle core adds to waking it on its own (see the module);
    0 on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return 0.0
    same = _pipe_round_trips((cores[0], cores[0]), reps)
    across = _pipe_round_trips((cores[0], cores[1]), reps)
    return max(0.0, (across - same) / 2)


def _spin(duration_s: float, fd: int) -> None:  # pragma: no cover - runs in a forked child
    end = time.perf_counter() + duration_s
    now = time.perf_counter()
    run_start, runs = now, []
    while now < end:
        prev, now = now, time.perf_counter()
        if now - prev > GAP_S:
            runs.append(prev - run_start)
            run_start = now
    os.write(fd, (" ".join(f"{r:.9f}" for r in runs[1:]) + "\n").encode())


# Where Linux keeps the scheduler's migration cost (CFS: a task that ran on a core within this long
# is cache-hot, and an idle core does not pull it over); the kernel's default when neither is readable.
MIGRATION_COST_FILES = (
    "/proc/sys/kernel/sched_migration_cost_ns",
    "/sys/kernel/debug/sched/migration_cost_ns",
)


def migration_cost_s() -> tuple[float, str]:
    """(the scheduler's migration cost in seconds, where it was read: a file, or 'kernel default')."""
    for path in MIGRATION_COST_FILES:
        try:
            with open(path) as f:
                return int(f.read().strip()) * 1e-9, path
        except (OSError, ValueError):
            continue
    return DEFAULT_MIGRATION_COST_S, "kernel default"


def time_slice_s(duration_s: float = 0.3) -> float:
    """The median time a process runs before another waiting for its core gets it (0 if never)."""
    core = min(os.sched_getaffinity(0))
    read_fd, write_fd = os.pipe()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                os.sched_setaffinity(0, {core})
                _spin(duration_s, write_fd)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        runs = [float(v) for v in f.read().split()]
    return statistics.median(runs) if runs else 0.0
