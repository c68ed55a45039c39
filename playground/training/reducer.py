"""The gradient strategy of the replicated modes (per_tensor, bucketed, after_backward): every
rank ends the step holding the sum over ranks of every gradient, and runs Adam on all of it.

The mode plans the buckets (`modes`, with `playground.collectives.bucketing.plan_buckets`): the
parameters in reverse order, because backward produces the last layers' gradients first, one per
tensor, DDP's (`torch/nn/parallel/distributed.py` and the C++ `Reducer`: a smaller first bucket
of 1 MiB so the first all-reduce starts early, each bucket closed by the tensor that makes it
reach its cap), or one of everything. Since the model's gradients are one flat buffer in layout
order and backward hands them over in exactly the reverse order, a bucket is one contiguous slice
of it (`Bucket.view(grads, forward=True)`), all-reduced in place: no packing copy, as with DDP's
`gradient_as_bucket_view=True`.

During backward (`on_grad_ready`, on the compute thread) each bucket counts down the gradients it
still waits for; the one that completes it hands the bucket to the communication thread, which
all-reduces it while backward goes on. `reduce` then collects every bucket: the time it takes is
the step's exposed communication. Without overlap (after_backward: one bucket of everything),
`reduce` all-reduces on the compute thread after backward.

Each bucket's all-reduce is checked (`checks`): the thread takes the bucket's checksum before
and the sum of its result after.
"""

import time
from typing import cast

from playground.collectives.bucketing import Bucket
from playground.collectives.comm_thread import CommThread, allreduce_bucket
from playground.training.checks import Reduction, checksum, element_sum
from playground.training.whole_params import WholeParams
from playground.transformer.layout import ParamLayout
from playground.transformer.optim import Adam


def bucket_of_param(layout: ParamLayout, buckets: list[Bucket]) -> dict[int, int]:
    """Layout index -> the bucket holding that parameter (buckets count tensors in backward
    order, the layout's reversed)."""
    backward = list(reversed(layout.specs))
    return {backward[t].index: b.index for b in buckets for t in b.tensor_indices}


class AllReduceBuckets(WholeParams):
    """Sums the gradients over ranks bucket by bucket, then Adam on every parameter (a
    `modes.GradientStrategy`; `mode.overlaps`: on the communication thread during backward)."""

    def __init__(self, comm, model, buckets: list[Bucket], setup, mode, owns_comm: bool = True):
        self.comm, self.buckets, self.algorithm = comm, buckets, setup.algorithm
        self.params, self.grads = model.params, model.grads
        self.span_args = {"mode": mode.name}
        self.views = [b.view(model.grads, forward=True) for b in buckets]
        self.bucket_of = bucket_of_param(model.layout, buckets)
        self.optimizer = Adam(model.params.size, setup.config.np_dtype, setup.adam)
        self.lr_at = setup.lr_at
        self.pending: list[int] = []
        self.step = 0
        self.sums: dict[int, Reduction] = {}
        self.collective_s = 0.0  # this step's all-reduce time, where it ran
        self.thread = CommThread(comm, reduce=self._reduce) if mode.overlaps else None

    @property
    def on_grad_ready(self):
        """The backward hook, or None when nothing overlaps (backward then runs without one)."""
        return self._ready if self.thread is not None else None

    def begin(self, step: int) -> None:
        self.step = step
        self.pending = [b.num_tensors for b in self.buckets]
        self.sums = {}
        self.collective_s = 0.0

    def _ready(self, index: int) -> None:
        b = self.bucket_of[index]
        self.pending[b] -= 1
        if self.pending[b] == 0:
            assert self.thread is not None  # the hook is given only with a thread
            self.thread.submit(b, self.step)

    def _reduce(self, b: int, step: int) -> float:
        """All-reduce bucket b in place, between its checksums; returns the all-reduce's seconds."""
        view = self.views[b]
        local_sum, local_abs = checksum(view)
        t0 = time.perf_counter()
        allreduce_bucket(self.comm, view, b, step, self.algorithm, inplace=True, **self.span_args)
        seconds = time.perf_counter() - t0
        self.sums[b] = Reduction(f"bucket {b}", local_sum, local_abs, element_sum(view))
        return seconds

    def reduce(self) -> None:
        """Every bucket of the step all-reduced (collected from the thread, or done here)."""
        if self.thread is not None:
            done = self.thread.wait_step(len(self.buckets), 4 * self.comm.timeout_s)
            self.collective_s = sum(cast(float, seconds) for seconds, _ in done.values())  # _reduce's
        else:
            self.collective_s = sum(self._reduce(b.index, self.step) for b in self.buckets)

    def reductions(self) -> list[Reduction]:
        return [self.sums[b.index] for b in self.buckets]

    def update(self) -> None:
        self.optimizer.step(self.params, self.grads, self.lr_at(self.step))

    def gather(self) -> None:
        """Nothing: every rank updated every parameter itself."""

    def state(self) -> dict:
        """Adam's m and v of every parameter, and its step count."""
        return {f"adam.{k}": v for k, v in self.optimizer.state().items()}

    def load_state(self, state: dict) -> None:
        self.optimizer.load_state({k.removeprefix("adam."): v for k, v in state.items()})

    def close(self) -> None:
        if self.thread is not None:
            self.thread.close()
