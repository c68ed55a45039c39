"""PyTorch DDP beside our training: the parent side, run by the launcher after our ranks finished.

Starts one `ddp_worker` process per rank with the env:// variables torchrun would set, on a free
loopback port, through the machinery the collectives' baselines use (`playground.launcher.procs`: every
worker in its own session, the first failure reported, everything reaped, a deadline), and returns
each rank's per-step records. torch is imported only by the workers, so this module imports
without it; `available()` says in one line how to install it.
"""

import importlib.util
import json
import sys
from pathlib import Path

from playground.comm.addresses import free_tcp_port
from playground.launcher.procs import run_workers, worker_env

INSTALL_HINT = "torch is not installed: pip install torch==2.13.0"


def available() -> str | None:
    """None if torch can be found; else the one line that says how to install it."""
    return None if importlib.util.find_spec("torch") is not None else INSTALL_HINT


def spec_of(params) -> dict:
    """What every worker needs to train exactly what our ranks trained."""
    return {
        "config": params.model_config.to_dict(),
        "seed": params.seed,
        "lr": params.lr,
        "schedule": params.schedule.to_dict(),
        "batch": params.batch,
        "steps": params.steps,
        "bucket_cap_mb": params.bucket_cap_mb,
        "first_bucket_mb": params.first_bucket_mb,
        "timeout_s": max(60.0, 10.0 * params.steps),
    }


def run(params, ranks: int, run_dir: Path) -> list[list[dict]]:
    """Every rank's step records (BaselineError, one line, if a worker fails or the deadline passes)."""
    out_dir = Path(run_dir) / "ddp"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = spec_of(params)
    print(
        f"PyTorch DDP baseline: {ranks} worker processes over Gloo -> {out_dir}", file=sys.stderr, flush=True
    )
    port = free_tcp_port()
    cmd = [
        sys.executable,
        "-m",
        "playground.training.ddp_worker",
        "--spec",
        json.dumps(spec),
        "--out",
        str(out_dir),
    ]
    env = {"WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    envs = [worker_env({**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(ranks)]
    per_rank = run_workers("ddp", [cmd] * ranks, envs, out_dir, ranks, spec["timeout_s"] * 2 + 60)
    return [[rec for rec in records if "step" in rec] for records in per_rank]
