"""A communication thread that all-reduces buckets as soon as backward marks them ready.

This is DDP's reducer in miniature: the compute (main) thread puts a bucket's index on the
`ready` queue when its last gradient is written and goes on computing; this thread takes it,
all-reduces it and puts (index, result, seconds) on `done`. The communicator is not
thread-safe, so while a step runs only this thread touches it; the main thread uses it again
(barrier, progress) only after `wait_step` has collected every bucket of the step.
A failure inside the thread is handed to the main thread by `wait_step`, never swallowed.
"""

import queue
import threading
import time

import numpy as np

from playground.collectives import allreduce
from playground.errors import WaitTimeout


class CommThread:
    """Owns the communicator during a step; `submit(b)` then `wait_step(n)`; `close()` at the end."""

    def __init__(self, comm, views: list[np.ndarray], algorithm: str = "ring", span_args: dict | None = None):
        self.comm, self.views, self.algorithm = comm, views, algorithm
        self.span_args = dict(span_args or {})
        self.ready: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
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
                with self.comm.tracer.span(
                    "bucket.allreduce",
                    cat="op",
                    bucket=bucket,
                    iter=step,
                    bytes=int(self.views[bucket].nbytes),
                    **self.span_args,
                ):
                    out = allreduce(self.comm, self.views[bucket], algorithm=self.algorithm)
                self.done.put((bucket, out, time.perf_counter() - t0))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                self.done.put((bucket, exc, 0.0))
                return

    def submit(self, bucket: int, step: int) -> None:
        self.ready.put((bucket, step))

    def wait_step(self, num_buckets: int, timeout_s: float) -> dict[int, tuple[np.ndarray, float]]:
        """{bucket: (result, seconds)} for the step's buckets; raises what the thread raised."""
        results = {}
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

    def close(self) -> None:
        self.ready.put(None)
        self._thread.join(timeout=5.0)
