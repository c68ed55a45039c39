"""The training lab's one loop: every step of a run on one rank trained, checked and recorded,
whether the run is data-parallel, pipeline-parallel or tensor-parallel; and the one process every
run is compared with.

A `Trainer` (`step.DataParallel`, `pipeline.step.PipelineParallel`, `tensor.step.TensorParallel`)
trains one step on this rank's rows and checks what only it knows (the tied embedding's copies,
the shards' replicated parameters). `train_steps` runs its steps: between a step's gradient
reduction and its update the data group exchanges its loss shares and checksums
(`checks.check_gradients`), after the update its parameter hashes (`checks.check_params`); a step
that breaks an invariant stops the run there, naming the step and the ranks. Each step's record
is the step, the global loss, the trainer's phase times and the checks' time; the reports read the
slowest rank's phases, as a step ends with its slowest rank.

`one_process` trains one process on the whole batch (`transformer.train_one_process`) and keeps
its parameters after every step; `gaps_to_one_process` compares a rank's run with it, cut to the
rank's part of the model (a stage's layers, a shard's slices).
"""

import functools
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from playground.core.errors import PeerLost
from playground.tracing.trace import CAT_META
from playground.training.checkpointing import Checkpoints
from playground.training.checks import Reduction, StepChecks
from playground.training.live import LiveRecovery
from playground.training.memory import memory_record, rss_bytes
from playground.training.modes import GradientStrategy, Mode
from playground.training.step import DataParallel, PhaseTimes, TrainSetup
from playground.transformer import BatchSampler, Transformer, train_one_process
from playground.transformer.plan import StagePlan

# How far a run may drift from one process, relative to the largest parameter (and a loss to
# one process's loss). Float64: the ranks add the same terms in another order than one process
# (micro-batches, stages, shards' partial products), and Adam carries the differences from step to
# step: measured within 1e-15 after 3 steps; the bound leaves room for other BLAS builds' orders.
TOLERANCE = {"float64": 1e-10, "float32": 1e-3}
LOSS_TOLERANCE = {"float64": 1e-12, "float32": 1e-4}

Check = Callable[[float, list[Reduction]], None]
Batch = Callable[[int], tuple[np.ndarray, np.ndarray]]  # step -> this rank's (inputs, targets)


class Trainer(Protocol):
    """One rank's part of a training run: its `gradients` (the mode's `GradientStrategy`) hold the
    parameters the checks agree on and the snapshots copy; they, `model.params` and the strategy's
    state are what a checkpoint keeps; `comm` is the rank's communicator, whose count of bytes sent
    each step's record takes."""

    comm: Any
    model: Transformer
    gradients: GradientStrategy

    def train_step(
        self, step: int, inputs: np.ndarray, targets: np.ndarray, check: Check | None
    ) -> PhaseTimes:
        """One step; `check(loss, reductions)` between the gradients' reduction and the update."""
        ...

    def check_step(self, step: int, times: PhaseTimes) -> None:
        """The trainer's own checks after the update (ResultMismatch naming the step)."""
        ...

    def close(self) -> None: ...


@dataclass
class StepLog:
    """What `train_steps` recorded: one record a step, the parameters' hash after the last, and
    the parameters after every step when they were kept."""

    steps: list[dict] = field(default_factory=list)
    digest: str = ""
    snapshots: list[np.ndarray] = field(default_factory=list)

    @property
    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps]


def train_steps(
    trainer: Trainer,
    group,
    mode: Mode,
    batch: Batch,
    steps: int,
    keep_params: bool = False,
    on_step: Callable[[int], None] | None = None,
    checkpoints: Checkpoints | None = None,
) -> StepLog:
    """`steps` steps of `trainer`, checked over its data-parallel `group` (module doc), then the
    trainer closed; `on_step(step)` runs after each step's checks, on this thread (progress).
    With `checkpoints` (the node's, `checkpointing.Checkpoints`), the run first takes what a
    checkpoint holds of it (and trains only the steps after it), and saves one when it is time."""
    log = StepLog()
    first = 0 if checkpoints is None else checkpoints.begin(trainer, log, steps)
    root = getattr(trainer.comm, "parent", trainer.comm)  # a group's bytes are its root's
    live = _live(trainer)
    try:
        step = first if live is None or not live.member.is_replacement else live.join(trainer, log)
        while step < steps:
            times, checks, sent = None, None, 0
            try:
                inputs, targets = batch(step)
                checks = StepChecks(group, step, mode, trainer.model.config.np_dtype)
                sent = root.bytes_sent
                t0_us = trainer.comm.tracer.now_us()
                times = trainer.train_step(step, inputs, targets, checks.gradients)
                step_us = trainer.comm.tracer.now_us() - t0_us
                sent = root.bytes_sent - sent
                log.digest = checks.params(trainer.gradients)
                trainer.check_step(step, times)
            except PeerLost:
                if live is None:
                    raise
                if checkpoints is not None:
                    checkpoints.abandon()
                step = live.recover(trainer, log, step, times, checks, sent)
                continue
            log.steps.append(
                {
                    "step": step,
                    "loss": checks.loss,
                    **times.record(),
                    "check_s": checks.seconds,
                    "sent_bytes": sent,
                }
            )
            if keep_params:
                log.snapshots.append(trainer.gradients.full_params())
            if checkpoints is not None:
                checkpoints.after_step(step, trainer, log)
            if live is not None:
                live.after_step(log)
            # the step's loss in the rank's log as it goes (the live page reads it; meta: not timing)
            trainer.comm.tracer.add(
                "train.step", CAT_META, t0_us, step_us, {"step": step, "loss": float(checks.loss)}
            )
            trainer.comm.tracer.flush()
            if on_step is not None:
                on_step(step)
            step += 1
    finally:
        trainer.close()
    if checkpoints is not None:
        checkpoints.end()
    return log


def rank_rows(sampler: BatchSampler, comm, num_blocks: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows of step `step`'s global batch, cut into `num_blocks` row-blocks (the world
    size the run started with): block r for rank r, and after a group shrank (`recovery.way:
    shrink`) the blocks k with k mod size == rank, one after the other, so the group of fewer ranks
    still covers the whole global batch, some ranks taking two blocks."""
    if comm.size == num_blocks:
        return sampler.rank_batch(step, comm.rank, num_blocks)
    mine = [sampler.rank_batch(step, k, num_blocks) for k in range(comm.rank, num_blocks, comm.size)]
    return np.concatenate([x for x, _ in mine]), np.concatenate([y for _, y in mine])


def _live(trainer) -> LiveRecovery | None:
    """The trainer's live recovery when its communicator can re-form its group (`recovery.way:
    peer`) and the trainer can rebuild its strategy over it; None: a failure ends the run."""
    member = getattr(trainer.comm, "live", None)
    rebuild = getattr(trainer, "reform", None)
    return None if member is None or rebuild is None else LiveRecovery(trainer.comm, member, rebuild)


def train_mode(
    comm,
    mode: Mode,
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    on_step=None,
    checkpoints: Checkpoints | None = None,
) -> tuple[dict, DataParallel]:
    """(this rank's record of `steps` data-parallel steps of `mode`, the trained DataParallel)."""
    start_rss = rss_bytes()
    dp = DataParallel(comm, mode, setup)
    log = train_steps(
        dp,
        comm,
        mode,
        functools.partial(rank_rows, sampler, comm, comm.size),
        steps,
        on_step=on_step,
        checkpoints=checkpoints,
    )
    record = {
        "mode": mode.name,
        "host": socket.gethostname(),
        "steps": log.steps,
        "hash": log.digest,
        "buckets": [b.num_bytes for b in dp.gradients.buckets],
        "memory": memory_record(dp.gradients.memory(), start_rss),
    }
    return record, dp


@dataclass(frozen=True)
class OneProcess:
    """One process trained on the whole batch: its loss before and its parameters after each step."""

    losses: list[float]
    params: list[np.ndarray]


def one_process(setup: TrainSetup, sampler: BatchSampler, steps: int) -> OneProcess:
    """`steps` steps of one process from the runs' start, at the runs' learning rates."""
    params: list[np.ndarray] = []
    _, losses = train_one_process(
        setup.config,
        sampler,
        steps,
        adam=setup.adam,
        seed=setup.seed,
        schedule=setup.schedule,
        on_step=lambda step, loss, model: params.append(model.params.copy()),
    )
    return OneProcess(losses, params)


def gaps_to_one_process(
    setup: TrainSetup,
    plan: StagePlan,
    reference: OneProcess,
    losses: list[float] | None,
    snapshots: list[np.ndarray],
) -> dict:
    """A rank's run against one process's, on the rank's part of the model (`plan.take`): the
    largest parameter difference relative to the largest parameter over the steps, the largest
    relative loss gap (None without `losses`: a stage that holds no loss), and whether every
    parameter is bit for bit the same."""
    mine = [plan.take(setup.config, p) for p in reference.params]
    pairs = list(zip(snapshots, mine, strict=True))
    return {
        "param_gap": max(float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))) for got, ref in pairs),
        "loss_gap": None
        if losses is None
        else max(abs(a - b) / abs(b) for a, b in zip(losses, reference.losses, strict=True)),
        "bitwise": all(np.array_equal(got, ref) for got, ref in pairs),
    }


def gap_failures(name: str, param_gap: float | None, loss_gap: float | None, dtype: str) -> list[str]:
    """A run's failures against one process: its parameters beyond `TOLERANCE`, its losses beyond
    `LOSS_TOLERANCE` (a gap that is None was not measured)."""
    out = []
    if param_gap is not None and not param_gap <= TOLERANCE[dtype]:
        out.append(f"{name}: parameters {param_gap:.2e} from one process's (allowed {TOLERANCE[dtype]:g})")
    if loss_gap is not None and not loss_gap <= LOSS_TOLERANCE[dtype]:
        out.append(f"{name}: losses {loss_gap:.2e} from one process's (allowed {LOSS_TOLERANCE[dtype]:g})")
    return out


def one_process_note(rows: list[dict], why: str) -> list[str]:
    """The note on the runs' largest gaps to one process (`param_gap`, `loss_gap` of the report's
    rows, NaN where not measured) and `why` they are not zero; none if no run was compared."""
    gaps = [r["param_gap"] for r in rows if not math.isnan(r["param_gap"])]
    if not gaps:
        return []
    loss_gaps = [r["loss_gap"] for r in rows if not math.isnan(r["loss_gap"])]
    return [
        f"checked against one process on the whole batch after every step: parameters within "
        f"{max(gaps):.1e} of the largest, losses within {max(loss_gaps, default=math.nan):.1e} ({why})"
    ]
