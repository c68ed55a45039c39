"""PyTorch FSDP2 beside our ZeRO-3: the parent side, run by the launcher after our ranks finished.

Starts one `fsdp_worker` process per rank (torch's `fully_shard` over Gloo, our model, weights,
batches, Adam and schedule, with the run's units, prefetch and resharding) through the DDP
baseline's machinery (`ddp_baseline.run_baseline`: `playground.launcher.procs`, every worker
watched, the first failure reported, everything reaped) and returns each rank's per-step records.
torch is imported only by the workers; `ddp_baseline.available()` says how to install it.
"""

from pathlib import Path

from playground.training.ddp_baseline import run_baseline, training_spec


def spec_of(params) -> dict:
    """What every worker needs to train exactly what our ranks trained, sharded as ours."""
    return training_spec(
        params,
        unit_blocks=params.unit_blocks,
        prefetch=params.prefetch,
        reshard_after_forward=params.reshard_after_forward,
    )


def run(params, ranks: int, run_dir: Path) -> list[list[dict]]:
    """Every rank's step records (BaselineError, one line, if a worker fails or the deadline passes)."""
    return run_baseline(
        "fsdp", "PyTorch FSDP2", "playground.training.fsdp_worker", spec_of(params), ranks, run_dir
    )
