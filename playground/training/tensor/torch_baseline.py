"""torch.distributed.tensor.parallel beside our tensor parallelism: the parent side, run by the
launcher after our ranks finished.

Starts one `torch_worker` process per rank with the env:// variables torchrun would set, through
the machinery the DDP baseline uses (`playground.launcher.procs`: each worker in its own session,
the first failure reported, everything reaped, a deadline), and returns each rank's records. torch
is imported only by the workers, so this module imports without it.
"""

import json
import sys
from pathlib import Path

from playground.comm.addresses import free_tcp_port
from playground.launcher.procs import run_workers, worker_env
from playground.training.ddp_baseline import available

__all__ = ["available", "run", "spec_of"]


def spec_of(params, ranks: int) -> dict:
    """What every worker needs to train exactly what our ranks trained."""
    sizes = params.sizes(ranks)
    return {
        "config": params.model_config.to_dict(),
        "seed": params.seed,
        "lr": params.lr,
        "batch": params.batch,
        "steps": params.steps,
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
    cmd = [sys.executable, "-m", "playground.training.tensor.torch_worker", "--spec", json.dumps(spec)]
    cmd += ["--out", str(out_dir)]
    env = {"WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_tcp_port())}
    envs = [worker_env({**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(ranks)]
    per_rank = run_workers("tensor_parallel", [cmd] * ranks, envs, out_dir, ranks, spec["timeout_s"] * 2 + 60)
    return [[rec for rec in records if "step" in rec] for records in per_rank]
