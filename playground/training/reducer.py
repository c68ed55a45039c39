"""The gradient reducer of the replicated modes (per_tensor, bucketed, after_backward): every
rank ends the step holding the sum over ranks of every gradient, and runs Adam on all of it.

Buckets are planned as PyTorch DDP plans them (`torch/nn/parallel/distributed.py` and the C++
`Reducer`): the parameters in reverse order, because backward produces the last layers'
gradients first, packed into buckets with a smaller first bucket (1 MiB) so the first all-reduce starts early,
each bucket closed by the tensor that makes it reach its cap
(`playground.collectives.bucketing.assign_buckets(..., close_at_cap=True)`, DDP's rule). Since the model's gradients
are one flat buffer in layout order and backward hands them over in exactly the reverse order,
a bucket is one contiguous slice of it, all-reduced in place: no packing copy, as with DDP's
`gradient_as_bucket_view=True`.

During backward (`on_grad_ready`, on the compute thread) each bucket counts down the gradients it
still waits for; the one that completes it hands the bucket to the communication thread, which
all-reduces it while backward goes on. `wait` then collects every bucket: the time it takes is the
step's exposed communication. Without overlap (after_backward: one bucket of everything), `wait`
all-reduces on the compute thread after backward.

Each bucket's all-reduce is checked (`checks`): the thread takes the bucket's checksum before
and the sum of its result after.
"""

import time
from dataclasses import dataclass

import numpy as np

from playground.collectives import allreduce
from playground.collectives.bucketing import assign_buckets, per_tensor, single_bucket
from playground.collectives.comm_thread import CommThread
from playground.core.errors import UsageError
from playground.training.checks import Reduction, checksum, element_sum
from playground.transformer.layout import ParamLayout


@dataclass(frozen=True)
class GradBucket:
    """Elements [start, stop) of the flat gradient buffer: the parameters `params` (layout
    indices, in the order backward finishes them)."""

    index: int
    start: int
    stop: int
    params: tuple[int, ...]

    @property
    def num_elements(self) -> int:
        return self.stop - self.start


def plan_buckets(
    layout: ParamLayout, itemsize: int, mode: str, cap_bytes: int = 0, first_cap_bytes: int | None = None
) -> list[GradBucket]:
    """The buckets of `mode` (per_tensor: one per parameter; bucketed: DDP's caps; after_backward
    and zero1: one of everything), in the order they become ready."""
    backward = list(reversed(layout.specs))
    sizes = [s.size * itemsize for s in backward]
    if mode == "per_tensor":
        groups = per_tensor(sizes)
    elif mode == "bucketed":
        groups = assign_buckets(sizes, cap_bytes, first_cap_bytes, close_at_cap=True)
    elif mode in ("after_backward", "zero1"):
        groups = single_bucket(sizes)
    else:
        raise UsageError(f"unknown mode {mode!r}", field="mode")
    return [
        GradBucket(
            g.index,
            backward[g.last].offset,
            backward[g.first].stop,
            tuple(backward[i].index for i in g.tensor_indices),
        )
        for g in groups
    ]


class GradReducer:
    """Sums `grads` over ranks bucket by bucket; `begin(step)`, `on_grad_ready` from backward,
    `wait()` after it, `reductions()` for the step's checks, `close()` at the end."""

    def __init__(
        self,
        comm,
        grads: np.ndarray,
        buckets: list[GradBucket],
        overlap: bool,
        algorithm: str,
        span_args: dict,
    ):
        self.comm, self.buckets, self.algorithm = comm, buckets, algorithm
        self.span_args = span_args
        self.views = [grads[b.start : b.stop] for b in buckets]
        self.bucket_of = {p: b.index for b in buckets for p in b.params}
        self.pending: list[int] = []
        self.step = 0
        self.sums: dict[int, Reduction] = {}
        self.allreduce_s = 0.0  # this step's all-reduce time, where it ran
        self.thread = CommThread(comm, reduce=self._reduce) if overlap else None

    @property
    def on_grad_ready(self):
        """The backward hook, or None when nothing overlaps (backward then runs without one)."""
        return self._ready if self.thread is not None else None

    def begin(self, step: int) -> None:
        self.step = step
        self.pending = [len(b.params) for b in self.buckets]
        self.sums = {}
        self.allreduce_s = 0.0

    def _ready(self, index: int) -> None:
        b = self.bucket_of[index]
        self.pending[b] -= 1
        if self.pending[b] == 0:
            self.thread.submit(b, self.step)

    def _reduce(self, b: int, step: int) -> float:
        """All-reduce bucket b in place, between its checksums; returns the all-reduce's seconds."""
        view = self.views[b]
        local_sum, local_abs = checksum(view)
        t0 = time.perf_counter()
        with self.comm.tracer.span(
            "bucket.allreduce", cat="op", bucket=b, step=step, bytes=int(view.nbytes), **self.span_args
        ):
            allreduce(self.comm, view, algorithm=self.algorithm, inplace=True)
        seconds = time.perf_counter() - t0
        self.sums[b] = Reduction(f"bucket {b}", local_sum, local_abs, element_sum(view))
        return seconds

    def wait(self) -> None:
        """Every bucket of the step all-reduced (collected from the thread, or done here)."""
        if self.thread is not None:
            done = self.thread.wait_step(len(self.buckets), 4 * self.comm.timeout_s)
            self.allreduce_s = sum(seconds for seconds, _ in done.values())
        else:
            self.allreduce_s = sum(self._reduce(b.index, self.step) for b in self.buckets)

    def reductions(self) -> list[Reduction]:
        return [self.sums[b.index] for b in self.buckets]

    def close(self) -> None:
        if self.thread is not None:
            self.thread.close()
