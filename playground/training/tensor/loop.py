"""A tensor-parallel run on one rank: `train_tensor`, `steps` steps at one grid (data x tensor),
from the same start as every other, in the training lab's loop (`training.loop.train_steps`: its
checks over `grid.data`, then the shards' over `grid.tensor`, `TensorParallel.check_shards`);
returns the record (loss, phases, the tensor all-reduces' time and count) and, given one process's
run (`training.loop.one_process`), the gaps to it cut to this shard (`gaps_to_one_process`).
"""

from playground.training.checkpointing import Checkpoints
from playground.training.loop import OneProcess, gaps_to_one_process, train_steps
from playground.training.modes import Mode
from playground.training.step import TrainSetup
from playground.training.tensor.step import TensorParallel
from playground.transformer import BatchSampler


def train_tensor(
    comm,
    grid,
    mode: Mode,
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    algorithm: str = "auto",
    reference: OneProcess | None = None,
    on_step=None,
    checkpoints: Checkpoints | None = None,
) -> dict:
    """This rank's record of the run; with `reference` (`loop.one_process`'s), its gaps to it."""
    tp = TensorParallel(comm, grid, mode, setup, algorithm)
    log = train_steps(
        tp,
        grid.data,
        mode,
        lambda step: sampler.rank_batch(step, grid.data_index, grid.shape.data),
        steps,
        keep_params=reference is not None,
        on_step=on_step,
        checkpoints=checkpoints,
    )
    record = {
        "tensor": grid.shape.tensor,
        "data": grid.shape.data,
        "rows": sampler.batch // grid.shape.data,  # this replica's sequences per step
        "tensor_index": grid.tensor_index,
        "data_index": grid.data_index,
        "plan": tp.plan.describe(),
        "steps": log.steps,
        "hash": log.digest,
        "params_bytes": int(tp.gradients.memory()["params_bytes"]),
        "optimizer_bytes": int(tp.gradients.state_bytes),
        "bucket_bytes": [b.num_bytes for b in tp.gradients.buckets],
    }
    if reference is not None:
        record["reference"] = gaps_to_one_process(setup, tp.plan, reference, log.losses, log.snapshots)
    return record
