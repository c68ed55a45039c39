"""torch.distributed.tensor.parallel beside our tensor parallelism: the parent side, run by the
launcher after our ranks finished.

Starts one `torch_worker` process per rank with the env:// variables torchrun would set, through
the machinery the DDP baseline uses (`playground.launcher.procs`: each worker in its own session,
the first failure reported, everything reaped, a deadline), and returns each rank's records. torch
is imported only by the workers, so this module imports without it.
"""

import sys
from pathlib import Path

from playground.launcher.procs import run_env_workers
from playground.training.ddp_baseline import available, model_spec

__all__ = ["available", "run", "spec_of"]


def spec_of(params, ranks: int) -> dict:
    """What every worker needs to train exactly what our ranks trained."""
    sizes = params.sizes(ranks)
    return {
        **model_spec(params),
        "tensor": list(sizes),
        "timeout_s": max(60.0, 10.0 * params.steps * len(sizes)),
    }


def run(params, ranks: int, run_dir: Path) -> list[list[dict]]:
    """Every rank's step records (BaselineError, one line, if a worker fails or the deadline passes)."""
    out_dir = Path(run_dir) / "tensor_parallel"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = spec_of(params, ranks)
    print(
        f"torch.distributed.tensor.parallel baseline: {ranks} worker processes over Gloo -> {out_dir}",
        file=sys.stderr,
        flush=True,
    )
    module = "playground.training.tensor.torch_worker"
    per_rank = run_env_workers("tensor_parallel", module, spec, ranks, out_dir, spec["timeout_s"] * 2 + 60)
    return [[rec for rec in records if "step" in rec] for records in per_rank]
