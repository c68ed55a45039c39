"""The slow drill: a rank whose own work takes `factor` times as long, as on a slower or shared CPU.

A straggler is not a failure: it finishes, only late, and its peers wait for it. To make one on
purpose (a scenario's `fault: {action: slow, factor: 2}`), the rank's work is stretched, not its
waiting: whatever CPU a thread spends between two of its posts, outside the receives it waits in,
is followed by (factor - 1) times as much sleep before the post goes out; a compute span of the
node's (cat "compute") is followed by (factor - 1) times its own duration when it ends (wall time:
its matrix products may run on BLAS's threads, whose CPU is not the calling thread's), and its CPU
is not stretched again at the next post. So a training step's forward and backward take twice
as long, and so does the Python and reduction work of an all-reduce, while the time spent waiting
for peers stays what it is (stretching it too would feed back: the straggler's peers would wait for
it, and it for them, longer and longer).

Each post pays for the work before it at once, so the sleep lands in the operation that did the work
(a collective's time, not the barrier after it): the thread's timer slack is cut to 1 us
(`set_timer_slack_ns`), and debts under SLEEP_MIN_S, shorter than a sleep can be, wait for the next post.
A sleep that overruns (the machine is busy) is not paid back by sleeping less later, which would
bunch the slowness into a few operations: the rank is at least `factor` times slower. The drill costs the slow rank two CPU-clock reads per
post and receive (a few hundred nanoseconds each); the others pay nothing.
"""

import threading
import time

from playground.core.machine import set_timer_slack_ns

SLEEP_MIN_S = 20e-6


class Slowdown:
    """The slow rank's account: armed by the drill (`arm`), charged by its posts and compute spans."""

    def __init__(self, factor: float):
        self.factor = factor
        self.armed = False
        self._local = threading.local()

    def arm(self) -> None:
        self.armed = True

    def _state(self):
        st = self._local
        if not hasattr(st, "last_cpu"):
            st.last_cpu, st.excluded, st.debt = time.thread_time(), 0.0, 0.0
            set_timer_slack_ns(1000)
        return st

    def exclude(self, cpu_s: float) -> None:
        """CPU of this thread not to stretch at its next post (a wait for a message, a span already
        stretched)."""
        self._state().excluded += cpu_s

    def before_post(self) -> None:
        """A post of this thread: sleep (factor - 1) x its own CPU since its previous post."""
        st = self._state()
        now = time.thread_time()
        busy = max(0.0, now - st.last_cpu - st.excluded)
        st.last_cpu, st.excluded = now, 0.0
        if self.armed:
            self._owe(st, (self.factor - 1) * busy)

    def _owe(self, st, seconds: float) -> None:
        st.debt += seconds
        if st.debt >= SLEEP_MIN_S:
            time.sleep(st.debt)
            st.debt = 0.0  # a sleep that overran (a busy machine) is not paid back by later work

    def stretch_spans(self, span):
        """`tracer.span` whose compute spans, once armed, last `factor` times their CPU time."""

        def slowed(name, cat="compute", **args):
            inner = span(name, cat, **args)
            return _Stretched(self, inner) if cat == "compute" else inner

        return slowed


class _Stretched:
    """A compute span followed by its stretch."""

    __slots__ = ("slow", "inner", "cpu0", "t0")

    def __init__(self, slow: Slowdown, inner):
        self.slow, self.inner = slow, inner

    def __enter__(self):
        self.cpu0, self.t0 = time.thread_time(), time.perf_counter()
        return self.inner.__enter__()

    def __exit__(self, *exc):
        if self.slow.armed:
            st = self.slow._state()
            st.excluded += time.thread_time() - self.cpu0
            self.slow._owe(st, (self.slow.factor - 1) * (time.perf_counter() - self.t0))
        return self.inner.__exit__(*exc)
