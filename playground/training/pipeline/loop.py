"""A pipeline run on one rank: each schedule's steps trained, checked and recorded; the stages'
compute calibrated; one process's training beside it.

- `train_schedule`: `steps` steps of one schedule at one micro-batch count, from the same start as
  every other, in the training lab's loop (`training.loop.train_steps`: its checks over the data
  group, then the tied embedding's); returns the records (loss, phases, activations held) and, when
  asked, this stage's parameters after every step.
- `calibrate`: each stage's forward and backward of one micro-batch, timed with the stages taking
  turns (so no two stages share a core while timed): the compute of the step-time model.
- `reference_gaps`: one process trained on the whole batch (`training.loop.one_process`), its
  parameters after every step compared with this stage's (`training.loop.gaps_to_one_process`).
"""

import statistics
import time

import numpy as np

from playground.training.checkpointing import Checkpoints
from playground.training.loop import gaps_to_one_process, one_process, train_steps
from playground.training.modes import Mode
from playground.training.pipeline.schedules import ScheduleKind
from playground.training.pipeline.step import PipelineParallel
from playground.training.step import TrainSetup
from playground.transformer import BatchSampler, Transformer
from playground.transformer.plan import StagePlan


def train_schedule(
    comm,
    grid,
    plan: StagePlan,
    mode: Mode,
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    schedule: ScheduleKind,
    num_micro_batches: int,
    run: int,
    keep_params: bool = False,
    on_step=None,
    checkpoints: Checkpoints | None = None,
) -> tuple[dict, list[np.ndarray]]:
    """(this rank's record of the run, its parameters after each step if `keep_params`)."""
    pp = PipelineParallel(comm, grid, plan, mode, setup, schedule, num_micro_batches, run)
    log = train_steps(
        pp,
        grid.data,
        mode,
        lambda step: sampler.rank_batch(step, grid.data_index, grid.shape.data),
        steps,
        keep_params,
        on_step,
        checkpoints,
    )
    record = {
        "run": run,
        "schedule": schedule.name,
        "micro_batches": num_micro_batches,
        "rows": sampler.batch // grid.shape.data,  # this replica's sequences per step
        "stage": plan.stage,
        "data_index": grid.data_index,
        "hash": log.digest,
        "steps": log.steps,
        "params_bytes": int(pp.buffers.params.nbytes),
        "optimizer_bytes": int(pp.gradients.state_bytes),
    }
    return record, log.snapshots


def calibrate(
    comm, grid, plan: StagePlan, setup: TrainSetup, sampler: BatchSampler, rows: int, repeats: int
) -> list[dict]:
    """Every stage's {"stage", "rows", "forward_s", "backward_s"} for one micro-batch of `rows`
    sequences (median of `repeats`), the stages timed one after another; the same list on every rank."""
    model = Transformer(setup.config, seed=setup.seed, plan=plan)
    inputs, targets = sampler.rank_batch(0)
    inputs, targets = inputs[:rows], targets[:rows]
    rng = np.random.default_rng(plan.stage)
    shape = (*inputs.shape, setup.config.d_model)
    x = inputs if plan.embedding else rng.standard_normal(shape).astype(setup.config.np_dtype)
    dy = None if plan.head else rng.standard_normal(shape).astype(setup.config.np_dtype)
    mine = None
    for stage in range(plan.num_stages):
        comm.barrier()
        if stage == plan.stage and grid.data_index == 0:
            forward_times, backward_times = [], []
            for _ in range(repeats + 1):  # the first round warms the caches and is left out
                t0 = time.perf_counter()
                _, saved = model.forward_stage(x, targets, loss_denominator=setup.global_tokens)
                t1 = time.perf_counter()
                model.backward_stage(saved, dy)
                forward_times.append(t1 - t0)
                backward_times.append(time.perf_counter() - t1)
            mine = {
                "stage": stage,
                "rows": rows,
                "forward_s": statistics.median(forward_times[1:]),
                "backward_s": statistics.median(backward_times[1:]),
            }
    everyone = comm.allgather_obj(mine)
    return sorted((c for c in everyone if c is not None), key=lambda c: c["stage"])


def reference_gaps(
    setup: TrainSetup,
    sampler: BatchSampler,
    plan: StagePlan,
    steps: int,
    runs: list[tuple[list[float], list[np.ndarray]]],
) -> list[dict]:
    """One process trained once for `steps` steps on the whole batch; each run's (losses, this
    stage's parameters after each step) against it (`loop.gaps_to_one_process`; losses only on the
    last stage)."""
    reference = one_process(setup, sampler, steps)
    return [
        gaps_to_one_process(setup, plan, reference, losses if plan.head else None, snapshots)
        for losses, snapshots in runs
    ]
