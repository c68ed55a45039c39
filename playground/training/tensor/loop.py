"""A tensor-parallel run on one rank: its steps trained, checked and recorded; one process's
training beside it.

- `train_tensor`: `steps` steps at one grid (data x tensor), from the same start as every other;
  after each step the training lab's checks over `grid.data` (`checks.StepChecks`) and the shards'
  over `grid.tensor` (`TensorParallel.check_shards`); returns the record (loss, phases, the tensor
  all-reduces' time and count) and, given one process's run, the gaps to it.
- `reference_gaps`: one process trained on the whole batch (`transformer.train`'s loop), its
  parameters after every step cut to this shard (`StagePlan.take`) and compared with this rank's:
  the largest difference relative to the largest parameter, and the losses' relative gaps.
"""

import numpy as np

from playground.training.checks import StepChecks
from playground.training.modes import Mode
from playground.training.step import TrainSetup
from playground.training.tensor.step import TensorParallel
from playground.transformer import Adam, BatchSampler, Transformer
from playground.transformer.plan import StagePlan


def train_tensor(
    comm,
    grid,
    mode: Mode,
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    algorithm: str = "auto",
    reference: tuple[list[float], list[np.ndarray]] | None = None,
    on_step=None,
) -> dict:
    """This rank's record of the run; with `reference` (`one_process`'s), its gaps to it."""
    tp = TensorParallel(comm, grid, mode, setup, algorithm)
    records, snapshots = [], []
    try:
        for step in range(steps):
            inputs, targets = sampler.rank_batch(step, grid.data_index, grid.shape.data)
            checks = StepChecks(grid.data, step, mode, tp.model.params.dtype)
            t = tp.train_step(step, inputs, targets, checks.gradients)
            checks.params(tp.model.params)
            tp.check_shards(step, t.loss)
            records.append(
                {
                    "step": step,
                    "loss": checks.loss,
                    "forward_s": t.forward_s,
                    "backward_s": t.backward_s,
                    "tensor_s": t.tensor_s,
                    "tensor_calls": t.tensor_calls,
                    "comm_s": t.comm_s,
                    "optimizer_s": t.optimizer_s,
                    "step_s": t.step_s,
                    "check_s": checks.seconds,
                }
            )
            if reference is not None:
                snapshots.append(tp.model.params.copy())
            comm.tracer.flush()
            if on_step is not None:
                on_step(step)
    finally:
        tp.close()
    record = {
        "tensor": grid.shape.tensor,
        "data": grid.shape.data,
        "rows": sampler.batch // grid.shape.data,  # this replica's sequences per step
        "tensor_index": grid.tensor_index,
        "data_index": grid.data_index,
        "plan": tp.plan.describe(),
        "steps": records,
        "params_bytes": int(tp.model.params.nbytes),
        "optimizer_bytes": int(tp.gradients.state_bytes),
        "bucket_bytes": [b.num_bytes for b in tp.gradients.buckets],
    }
    if reference is not None:
        record["reference"] = reference_gaps(
            setup, tp.plan, reference, [r["loss"] for r in records], snapshots
        )
    return record


def one_process(setup: TrainSetup, sampler: BatchSampler, steps: int) -> tuple[list[float], list[np.ndarray]]:
    """One process trained on the whole batch: its losses and its parameters after every step."""
    model = Transformer(setup.config, seed=setup.seed)
    optimizer = Adam(model.params.size, setup.config.np_dtype, setup.adam)
    losses, params = [], []
    for step in range(steps):
        inputs, targets = sampler.rank_batch(step)
        losses.append(model.forward(inputs, targets))
        model.backward()
        optimizer.step(model.params, model.grads)
        params.append(model.params.copy())
    return losses, params


def reference_gaps(
    setup: TrainSetup,
    plan: StagePlan,
    reference: tuple[list[float], list[np.ndarray]],
    losses: list[float],
    snapshots: list[np.ndarray],
) -> dict:
    """This shard's run against one process's (`one_process`): the largest parameter difference
    relative to the largest parameter over the steps, the largest relative loss gap, and whether
    every parameter is bit for bit the same."""
    ref_losses, ref_params = reference
    mine = [plan.take(setup.config, p) for p in ref_params]
    return {
        "param_gap": max(
            float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
            for got, ref in zip(snapshots, mine, strict=True)
        ),
        "loss_gap": max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True)),
        "bitwise": all(np.array_equal(got, ref) for got, ref in zip(snapshots, mine, strict=True)),
    }
