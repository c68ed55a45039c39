"""Keeping a set service time honestly on a shared 2-core Linux box.

`time.sleep` overshoots: Linux adds up to the thread's timer slack (50 us by default) and the
scheduler adds more when cores are busy (measured here: ~0.1 ms mean, a few ms at p99 with the
machine loaded). A queue at 95% load turns a 3% longer service into a much longer queue, so the
servers (1) drop the timer slack to 1 us, (2) sleep until a little before the deadline and spin
the rest, and (3) record the service time they actually delivered, which the reports use to
compute the model at the *effective* load beside the nominal one.
"""

import ctypes
import time

_PR_SET_TIMERSLACK = 29


def set_timer_slack_ns(slack_ns: int = 1) -> bool:
    """Ask Linux for tighter sleep wake-ups for this thread (prctl PR_SET_TIMERSLACK)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_TIMERSLACK, slack_ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def sleep_until(deadline_s: float, spin_tail_s: float = 0.0) -> None:
    """Wait until time.monotonic() >= deadline: sleep most of it, spin the last `spin_tail_s`."""
    remaining = deadline_s - time.monotonic()
    if remaining > spin_tail_s:
        time.sleep(remaining - spin_tail_s)
    while time.monotonic() < deadline_s:
        pass


def cpu_work(iterations: int) -> int:
    """Pure-Python CPU-bound loop: holds the GIL the whole time (why threads do not help)."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def calibrate_iterations(target_s: float, probe_iterations: int = 200_000) -> int:
    """Iterations of `cpu_work` that take about `target_s` on this machine right now."""
    t0 = time.perf_counter()
    cpu_work(probe_iterations)
    took = max(time.perf_counter() - t0, 1e-6)
    return max(1000, int(probe_iterations * target_s / took))


def machine_note() -> str:
    """One line on how busy the machine was, for reports whose timings it explains."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load1, load5, _ = os.getloadavg()
    busy = (
        " -- busier than its cores: expect late wake-ups and stretched timings"
        if load1 > (cores or 1)
        else ""
    )
    return f"Machine: {cores} cores usable, load average {load1:.1f} (1 min) / {load5:.1f} (5 min){busy}."
