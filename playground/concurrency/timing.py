"""Keeping a set service time honestly on a shared 2-core Linux box.

`time.sleep` overshoots: Linux adds up to the thread's timer slack (50 us by default) and the
scheduler adds more when cores are busy (measured here: ~0.1 ms mean, a few ms at p99 with the
machine loaded). A queue at 95% load turns a 3% longer service into a much longer queue, so the
servers (1) drop the timer slack to 1 us (playground.core.machine.set_timer_slack_ns), (2) sleep until a little before the deadline and spin
the rest, and (3) record the service time they actually delivered, which the reports use to
compute the model at the *effective* load beside the nominal one.
"""

import time


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
