"""A communication thread that all-reduces buckets as soon as backward marks them ready, and the
one call every lab all-reduces a bucket with (`allreduce_bucket`).

This is DDP's reducer in miniature: the compute (main) thread puts a bucket's index on the
`ready` queue when its last gradient is written and goes on computing; this thread takes it,
reduces it and puts (index, result, seconds) on `done`. What "reduce" means is the caller's:
by default `allreduce_bucket` of the bucket's view into a new array (the overlap lab); the
training lab passes its own (the same call in place, with a checksum before and after). The
communicator is not thread-safe, so while a step runs only this thread touches it; the main thread
uses it again (barrier, progress) only after `wait_step` has collected every bucket of the step.
A failure inside the thread is handed to the main thread by `wait_step`, never swallowed.

`allreduce_bucket` is also what runs a bucket on the main thread (the labs' serial schedules, the
training's all-reduce after backward), so every bucket's all-reduce is one `bucket.allreduce` span
with the same arguments (`bucket`, `step`, `bytes`, and the caller's, such as `mode`), wherever it
ran: the reports find them in the trace by that name.
"""

import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from playground.collectives import allreduce
from playground.core.errors import UsageError, WaitTimeout


def allreduce_bucket(
    comm,
    view: np.ndarray,
    bucket: int,
    step: int,
    algorithm: str = "ring",
    inplace: bool = False,
    **span_args,
) -> np.ndarray:
    """The all-reduce of bucket `bucket`'s `view` at step `step`, traced as `bucket.allreduce`
    (`span_args` add to the span's arguments); `inplace`: written into `view`."""
    with comm.tracer.span(
        "bucket.allreduce", cat="op", bucket=bucket, step=step, bytes=int(view.nbytes), **span_args
    ):
        return allreduce(comm, view, algorithm=algorithm, inplace=inplace)


class CommThread:
    """Owns the communicator during a step; `submit(b)` then `wait_step(n)`; `close()` at the end."""

    def __init__(
        self,
        comm,
        views: list[np.ndarray] | None = None,
        algorithm: str = "ring",
        span_args: dict | None = None,
        reduce: Callable[[Any, int], object] | None = None,
    ):
        """`reduce(bucket, step)` runs on the thread for each submitted bucket (default: the
        all-reduce of `views[bucket]` with `algorithm`, traced with `span_args`); a bucket is any
        hashable key the caller's `reduce` understands (the training lab's ZeRO jobs are tuples)."""
        self.comm, self.views, self.algorithm = comm, views, algorithm
        self.span_args = dict(span_args or {})
        self.reduce = reduce or self._allreduce
        self.ready: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        # what `wait_for` took off `done` before its own key came
        self._finished: dict[Hashable, tuple[object, float]] = {}
        self._thread = threading.Thread(target=self._run, name="comm", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self.ready.get()
            if item is None:
                return
            bucket, step = item
            try:
                t0 = time.perf_counter()
                out = self.reduce(bucket, step)
                self.done.put((bucket, out, time.perf_counter() - t0))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                self.done.put((bucket, exc, 0.0))
                return

    def _allreduce(self, bucket: int, step: int) -> np.ndarray:
        if self.views is None:
            raise UsageError("CommThread: the default reduce (an all-reduce of views[bucket]) needs `views`")
        return allreduce_bucket(self.comm, self.views[bucket], bucket, step, self.algorithm, **self.span_args)

    def submit(self, bucket: Hashable, step: int) -> None:
        self.ready.put((bucket, step))

    def wait_step(self, num_buckets: int, timeout_s: float) -> dict[Hashable, tuple[object, float]]:
        """{bucket: (result, seconds)} for the step's buckets; raises what the thread raised."""
        results: dict[Hashable, tuple[object, float]] = {}
        deadline = time.monotonic() + timeout_s
        while len(results) < num_buckets:
            left = deadline - time.monotonic()
            try:
                bucket, out, dt = self.done.get(timeout=max(0.0, left))
            except queue.Empty:
                raise WaitTimeout(
                    f"rank {self.comm.rank}: communication thread finished {len(results)} of "
                    f"{num_buckets} buckets in {timeout_s:.0f}s",
                    what="the communication thread's buckets",
                    waited_s=timeout_s,
                ) from None
            if isinstance(out, BaseException):
                raise out
            results[bucket] = (out, dt)
        return results

    def wait_for(self, key: Hashable, timeout_s: float) -> tuple[object, float]:
        """(result, seconds) of the job submitted as `key`, whatever finished before it kept for its
        own `wait_for` (jobs that finish in any order: a gather waited for while an earlier
        reduce-scatter is still queued); raises what the thread raised."""
        deadline = time.monotonic() + timeout_s
        while key not in self._finished:
            try:
                got, out, dt = self.done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WaitTimeout(
                    f"rank {self.comm.rank}: the communication thread did not finish {key!r} in {timeout_s:.0f}s",
                    what=f"the communication thread's {key!r}",
                    waited_s=timeout_s,
                ) from None
            if isinstance(out, BaseException):
                raise out
            self._finished[got] = (out, dt)
        return self._finished.pop(key)

    def close(self) -> None:
        self.ready.put(None)
        self._thread.join(timeout=5.0)
