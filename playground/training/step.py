"""One data-parallel training step on one rank, in any mode, timed phase by phase.

    forward (this rank's rows of the global batch; loss averaged by the global token count;
        ZeRO-3: each unit gathered before its piece)
    backward (each gradient handed to the mode's strategy as it is final: per_tensor, bucketed,
        zero2, zero3)
    communication the step waits for: the rest of the all-reduces or reduce-scatters (exposed), or
        after_backward's all-reduce, or ZeRO-1's reduce-scatter
    optimizer: Adam over the whole buffer, or a ZeRO shard
    ZeRO-1 and ZeRO-2: the all-gather of the updated parameters (communication again)

The mode's `GradientStrategy` (`modes`) does the communication and the update, so the step is one
path in every mode: begin, the model's pieces inside the strategy's `unit_span`, backward with its
hook, reduce, check, update, gather.

Gradient accumulation (`micro_batches` m > 1): the rank's rows in m forward and backward passes.
A strategy that keeps whole gradients (the replicated modes, ZeRO-1) has them added up here, in a
buffer of the whole gradient, and takes them over from the last pass only, as DDP under `no_sync`;
ZeRO-2 and ZeRO-3 take every pass's (`reduces_every_micro_batch`): a reduce-scatter per unit per
micro-batch.

Each rank computes its share of the global mean loss (`loss_denominator` = the global batch's
token count), so the SUM over ranks of its gradients is the gradient of the global batch, and
every mode applies the same update as one process would on the whole batch.

The phases are traced on the rank's log: the model's forward and backward pieces (`forward.h.3`,
`backward.h.3`, ...) and the optimizer as `compute` spans on the main thread, every all-reduce as
a `bucket.allreduce` span on the thread that ran it, each with its `mode` and `step`, which is how
the report reads from the trace how much of the all-reduces ran during backward.
"""

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from playground.collectives.bucketing import MIB
from playground.training.modes import Mode
from playground.training.units import Sharding
from playground.transformer import (
    AdamConfig,
    BatchSampler,
    LRSchedule,
    ModelConfig,
    Transformer,
    lecture_bytes,
)


class TrainingShape:
    """For a training node's frozen `Params` with layers, d_model, heads, context, dtype, batch and
    seed: the model they describe and the batches it trains on (ParamError naming the key if they do
    not fit), one definition for the train, train-pipeline and train-tensor nodes."""

    # the fields it reads (annotations only: a dataclass takes fields from its own annotations)
    layers: int
    d_model: int
    heads: int
    context: int
    dtype: str
    batch: int
    seed: int

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig(
            layers=self.layers, d_model=self.d_model, heads=self.heads, context=self.context, dtype=self.dtype
        )

    @property
    def sampler(self) -> BatchSampler:
        return BatchSampler(lecture_bytes(), self.context, self.batch, self.seed)


@dataclass(frozen=True)
class TrainSetup:
    """What every mode of one run shares: the model, its start, the optimizer, the buckets."""

    config: ModelConfig
    adam: AdamConfig
    seed: int
    global_tokens: int  # the loss denominator: batch x context of the global batch
    bucket_cap_bytes: int
    first_bucket_bytes: int | None
    algorithm: str = "ring"
    schedule: LRSchedule | None = None  # the learning rate of each step; None: adam.lr throughout
    sharding: Sharding = Sharding()  # ZeRO-2 and ZeRO-3's units, prefetch and resharding
    micro_batches: int = 1  # a data-parallel rank's rows in this many passes, gradients accumulated

    def lr_at(self, step: int) -> float | None:
        """Step `step`'s learning rate for `Adam.step` (None: the configured one)."""
        return self.schedule.lr_at(step) if self.schedule is not None else None

    @classmethod
    def of(cls, params, schedule: LRSchedule | None = None) -> "TrainSetup":
        """From a training node's `Params` (its `model_config`, lr, seed, batch, context, bucket caps
        in MiB, algorithm) and the learning-rate schedule: the train and train-pipeline nodes share it."""
        first = None if params.first_bucket_mb is None else round(params.first_bucket_mb * MIB)
        return cls(
            params.model_config,
            AdamConfig(lr=params.lr),
            params.seed,
            params.batch * params.context,
            round(params.bucket_cap_mb * MIB),
            first,
            params.algorithm,
            schedule,
        )


@dataclass(frozen=True)
class PhaseTimes:
    """A step on one rank: its share of the loss, and the phases a trainer's subclass adds, which
    the loop records (`record`)."""

    loss: float

    def record(self) -> dict:
        """Every field but the loss (the loop records the global batch's, from the checks)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "loss"}


@dataclass(frozen=True)
class StepTimes(PhaseTimes):
    """A data-parallel step, each phase in seconds. `comm_s` is the communication the step waited
    for (exposed); `allreduce_s` is the time the all-reduces (or ZeRO's collectives) took wherever
    they ran, hidden or not."""

    forward_s: float
    backward_s: float
    comm_s: float
    optimizer_s: float
    step_s: float
    allreduce_s: float
    compute_cpu_s: float  # the CPU time of forward, backward and the optimizer on this thread
    waited_s: float  # of comm_s, what forward and backward waited for (ZeRO-3's gathers)
    step_start: float  # time.monotonic() when the step began: one clock for the ranks of one host
    backward_end: float  # and when backward ended


@dataclass(frozen=True)
class Update:
    """What a step does after backward, each part timed: the reduction it waits for, the optimizer
    (and its CPU time on this thread), the gather (ZeRO-1's all-gather of the updated parameters;
    nothing in the other modes)."""

    reduce_s: float
    optimizer_s: float
    gather_s: float
    optimizer_cpu_s: float

    @property
    def comm_s(self) -> float:
        return self.reduce_s + self.gather_s


@dataclass(frozen=True)
class TrainerBuffers:
    """What a data-parallel strategy works on when the trainer keeps the gradients whole (a pipeline
    stage's accumulated ones, an expert-parallel rank's, summed over its expert group before the
    data group sees them): the parameters, the gradients, their layout (the model's `params`,
    `grads`, `layout` for one process), and the views the model reads its parameters through (`p`:
    where ZeRO-3 puts a unit it gathered)."""

    params: np.ndarray
    grads: np.ndarray
    layout: object
    p: dict


def reduce_and_update(gradients, loss: float, check=None, span=None, layout=None) -> Update:
    """The step after backward, in every mode and every trainer: `gradients.reduce()`,
    `check(loss, reductions)` (untimed: the checks are not part of the step), the update (traced as
    `span("optimizer")` if given), the gather. With `layout`, every gradient is first handed to a
    strategy that takes them as they are final (`on_grad_ready`), at once and in backward order,
    timed with the reduction: after a backward that could not hand them over as it went (a
    pipeline stage's micro-batches, a tensor-parallel shard's all-reduces on the same communicator)."""
    t0 = time.perf_counter()
    if layout is not None and gradients.on_grad_ready is not None:
        for spec in reversed(layout.specs):
            gradients.on_grad_ready(spec.index)
    gradients.reduce()
    t1 = time.perf_counter()
    if check is not None:
        check(loss, gradients.reductions())
    t2, cpu2 = time.perf_counter(), time.thread_time()
    if span is None:
        gradients.update()
    else:
        with span("optimizer"):
            gradients.update()
    t3, cpu3 = time.perf_counter(), time.thread_time()
    gradients.gather()
    return Update(t1 - t0, t3 - t2, time.perf_counter() - t3, cpu3 - cpu2)


class DataParallel:
    """`mode`'s model, communication and optimizer on this rank, from the same start as every other
    mode (`Transformer(config, seed)`)."""

    def __init__(self, comm, mode: Mode, setup: TrainSetup):
        self.comm, self.mode, self.setup = comm, mode, setup
        self.model = Transformer(setup.config, seed=setup.seed)
        self.gradients = mode.gradients(comm, self.model, setup)
        self.accumulated: np.ndarray | None = None  # the micro-batches' gradients added up (m > 1)
        self.pass_rows: int | None = None  # rows a pass, fixed by the first step (a shrunk group's
        # ranks may take two row-blocks a step: as many more passes, the same rows each)

    def train_step(self, step: int, inputs, targets, check=None) -> StepTimes:
        """One step; `check(loss, reductions)` runs between the gradients' reduction and the update
        (untimed: the checks are not part of the step)."""
        tracer, name, gradients, model = self.comm.tracer, self.mode.name, self.gradients, self.model

        def span(piece: str):
            return tracer.span(piece, cat="compute", mode=name, step=step)

        pieces = gradients.unit_span(span)
        if self.pass_rows is None:
            self.pass_rows = inputs.shape[0] // self.setup.micro_batches
        rows = self.pass_rows
        m = inputs.shape[0] // rows
        cpu0, t0, step_start = time.thread_time(), time.perf_counter(), time.monotonic()
        gradients.begin(step)
        loss = forward_s = backward_s = 0.0
        for i in range(m):
            x, y = inputs[i * rows : (i + 1) * rows], targets[i * rows : (i + 1) * rows]
            ta = time.perf_counter()
            loss += model.forward(x, y, loss_denominator=self.setup.global_tokens, span=pieces)
            tb = time.perf_counter()
            model.backward(self._hand_over(i, m), span=pieces)
            if i < m - 1 and not gradients.reduces_every_micro_batch:
                self._accumulate(first=i == 0)
            forward_s, backward_s = forward_s + tb - ta, backward_s + time.perf_counter() - tb
        t2, backward_end, cpu2 = time.perf_counter(), time.monotonic(), time.thread_time()
        waited = gradients.waited_s  # ZeRO-3's waits for its gathers, inside forward and backward
        u = reduce_and_update(gradients, loss, check, span)
        return StepTimes(
            loss,
            forward_s=forward_s - waited["forward"],
            backward_s=backward_s - waited["backward"],
            comm_s=u.comm_s + sum(waited.values()),
            optimizer_s=u.optimizer_s,
            step_s=(t2 - t0) + u.comm_s + u.optimizer_s,
            allreduce_s=gradients.collective_s,
            compute_cpu_s=(cpu2 - cpu0) + u.optimizer_cpu_s,
            waited_s=sum(waited.values()),
            step_start=step_start,
            backward_end=backward_end,
        )

    def _hand_over(self, i: int, m: int):
        """Backward's hook for pass i of m: the strategy's own, or (whole gradients, m > 1) none
        before the last pass and, in the last, each gradient completed with what the earlier
        passes accumulated before it is handed over."""
        ready = self.gradients.on_grad_ready
        if self.gradients.reduces_every_micro_batch or m == 1:
            return ready
        if i < m - 1:
            return None
        specs, grads, accumulated = self.model.layout.specs, self.model.grads, self.accumulated
        assert accumulated is not None

        def completed(index: int) -> None:
            spec = specs[index]
            grads[spec.offset : spec.stop] += accumulated[spec.offset : spec.stop]
            if ready is not None:
                ready(index)

        return completed

    def _accumulate(self, first: bool) -> None:
        if self.accumulated is None:
            self.accumulated = self.model.grads.copy()
        elif first:
            np.copyto(self.accumulated, self.model.grads)
        else:
            self.accumulated += self.model.grads

    def check_step(self, step: int, times: PhaseTimes) -> None:
        """Nothing beyond the loop's checks: every rank holds the whole model."""

    def reform(self, reopen) -> None:
        """Go on in a re-formed group (a live recovery, training/live.py): the strategy and its
        communication thread, which died with the old group, closed first (nothing then waits on the
        old transport), `reopen()` moves the communicator to the new group, and the strategy is built
        again over it with this rank's state (parameters are the model's, kept in place)."""
        state = {k: np.array(v, copy=True) for k, v in self.gradients.state().items()}
        self.gradients.close()
        reopen()
        self.gradients = self.mode.gradients(self.comm, self.model, self.setup)
        self.gradients.load_state(state)
        self.accumulated = None

    def close(self) -> None:
        self.gradients.close()
