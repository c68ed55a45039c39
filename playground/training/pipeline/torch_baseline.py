"""torch.distributed.pipelining beside our pipeline: the parent side, run by the launcher after our
ranks finished, and the comparison of the two (pure, no torch).

Starts one `torch_worker` process per rank with the env:// variables torchrun would set, through
the machinery the DDP baseline uses (`playground.launcher.procs`: each worker in its own session,
the first failure reported, everything reaped, a deadline), and returns each rank's records. torch
is imported only by the workers, so this module imports without it.
"""

from pathlib import Path

from playground.comm.group import GridShape
from playground.training.ddp_baseline import available, model_spec, run_baseline
from playground.training.training_stats import relative_gaps, timed_steps

__all__ = ["available", "run", "spec_of", "torch_rows"]


def spec_of(params, ranks: int) -> dict:
    """What every worker needs to train exactly what our ranks trained."""
    return {
        **model_spec(params),
        "pipeline": params.pipeline,
        "data": params.replicas(ranks),
        "runs": [[s, m] for s in params.schedule for m in params.micro_batches],
        "timeout_s": max(60.0, 5.0 * params.steps * len(params.schedule) * len(params.micro_batches)),
    }


def run(params, ranks: int, run_dir: Path) -> list[list[dict]]:
    """Every rank's step records (BaselineError, one line, if a worker fails or the deadline passes)."""
    module = "playground.training.pipeline.torch_worker"
    return run_baseline(
        "pipelining", "torch.distributed.pipelining", module, spec_of(params, ranks), ranks, run_dir
    )


def torch_rows(
    torch_records: list[list[dict]], ours: list[dict], shape: GridShape
) -> tuple[list[dict], list[float]]:
    """One row per run: the last step's loss of each, the largest relative gap of the losses over the
    steps, the median step time of the timed steps (slowest rank) of each; and every gap."""
    rows, every_gap = [], []
    last_stage = shape.rank_of(0, shape.pipeline - 1, 0)
    for k, run in enumerate(ours):
        per_rank = [[r for r in records if r["run"] == k] for records in torch_records]
        losses = [r["loss"] for r in per_rank[last_stage]]
        gaps = relative_gaps(run["losses"], losses)
        every_gap += gaps
        steps = len(per_rank[0])
        slowest = sorted(max(records[i]["step_s"] for records in per_rank) for i in timed_steps(steps))
        rows.append(
            {
                "schedule": run["schedule"],
                "m": run["m"],
                "loss_ours": run["losses"][-1],
                "loss_torch": losses[-1],
                "loss_gap": max(gaps),
                "step_ours_ms": run["step_ms"],
                "step_torch_ms": 1e3 * slowest[len(slowest) // 2],
            }
        )
    return rows, every_gap
