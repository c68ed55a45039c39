"""PyTorch DDP beside our training: the parent side, run by the launcher after our ranks finished.

Starts one `ddp_worker` process per rank with the env:// variables torchrun would set, on a free
loopback port, through the machinery the collectives' baselines use (`playground.launcher.procs`: every
worker in its own session, the first failure reported, everything reaped, a deadline), and returns
each rank's per-step records. torch is imported only by the workers, so this module imports
without it; `available()` says in one line how to install it.
"""

import importlib.util
import sys
from pathlib import Path

from playground.launcher.procs import run_env_workers

INSTALL_HINT = "torch is not installed: pip install torch==2.13.0"


def available() -> str | None:
    """None if torch can be found; else the one line that says how to install it."""
    return None if importlib.util.find_spec("torch") is not None else INSTALL_HINT


def model_spec(params) -> dict:
    """The model, its start, the optimizer and the batches: what a torch worker needs to train what our
    ranks trained (the pipeline's baseline adds its grid and schedules)."""
    return {
        "config": params.model_config.to_dict(),
        "seed": params.seed,
        "lr": params.lr,
        "batch": params.batch,
        "steps": params.steps,
    }


def training_spec(params, **extra) -> dict:
    """What a data-parallel worker needs to train exactly what our ranks trained (the model, the
    schedule, a deadline), with its own `extra` settings."""
    return {
        **model_spec(params),
        "schedule": params.schedule.to_dict(),
        **extra,
        "timeout_s": max(60.0, 10.0 * params.steps),
    }


def spec_of(params) -> dict:
    """What every DDP worker needs: the training and DDP's bucket caps."""
    return training_spec(params, bucket_cap_mb=params.bucket_cap_mb, first_bucket_mb=params.first_bucket_mb)


def run(params, ranks: int, run_dir: Path) -> list[list[dict]]:
    """Every rank's step records (BaselineError, one line, if a worker fails or the deadline passes)."""
    return run_baseline(
        "ddp", "PyTorch DDP", "playground.training.ddp_worker", spec_of(params), ranks, run_dir
    )


def run_baseline(
    name: str, title: str, module: str, spec: dict, ranks: int, run_dir: Path
) -> list[list[dict]]:
    """A torch baseline: one `module` worker per rank over Gloo (`procs.run_env_workers`), writing
    into run_dir/`name`, announced as `title` on stderr, with twice the spec's `timeout_s` and a
    minute as its deadline; every rank's step records."""
    out_dir = Path(run_dir) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{title} baseline: {ranks} worker processes over Gloo -> {out_dir}", file=sys.stderr, flush=True)
    per_rank = run_env_workers(name, module, spec, ranks, out_dir, spec["timeout_s"] * 2 + 60)
    return [[rec for rec in records if "step" in rec] for records in per_rank]
