"""torch.distributed.tensor.parallel beside our tensor parallelism: the parent side, run by the
launcher after our ranks finished.

Starts one `torch_worker` process per rank with the env:// variables torchrun would set, through
the machinery the DDP baseline uses (`playground.launcher.procs`: each worker in its own session,
the first failure reported, everything reaped, a deadline), and returns each rank's records. torch
is imported only by the workers, so this module imports without it.
"""

from pathlib import Path

from playground.training.ddp_baseline import available, model_spec, run_baseline

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
    module, spec = "playground.training.tensor.torch_worker", spec_of(params, ranks)
    return run_baseline("tensor_parallel", "torch.distributed.tensor.parallel", module, spec, ranks, run_dir)
