"""Baselines that run the same collective as ours, through Gloo (torch.distributed) or MPI (mpi4py).

`python -m playground bench allreduce ... --baseline gloo,mpi` calls `run_baseline` for each name and
puts its rows beside ours, so the ratio shows in one run. Both are optional extras: this package
imports without torch or mpi4py, and `available(name)` says in one line how to install what is
missing. Every worker process is reaped; the whole run has a deadline.
"""

import shutil
import tempfile
from pathlib import Path

from playground.baselines import common
from playground.baselines.common import COLLECTIVES, DTYPES, OPS, bus_factor
from playground.core.errors import ScenarioError
from playground.launcher.procs import BaselineError

BASELINES = ("gloo", "mpi")

__all__ = [
    "BASELINES",
    "COLLECTIVES",
    "DTYPES",
    "OPS",
    "BaselineError",
    "available",
    "bus_factor",
    "run_baseline",
]


def _module(name: str):
    if name == "gloo":
        from playground.baselines import gloo

        return gloo
    if name == "mpi":
        from playground.baselines import mpi

        return mpi
    raise ScenarioError(f"unknown baseline {name!r}; allowed: {', '.join(BASELINES)}")


def available(name: str) -> str | None:
    """None if baseline `name` can run here; else one line saying why not and how to install it."""
    try:
        return _module(name).available()
    except ScenarioError as e:
        return str(e)


def run_baseline(
    name: str,
    collective: str,
    sizes: list[int],
    ranks: int,
    dtype: str = "float32",
    op: str = "sum",
    iters: int = 20,
    warmup: int = 5,
    timeout_s: float = 300.0,
    work_dir: Path | None = None,
) -> list[dict]:
    """Run `collective` with `ranks` processes of baseline `name`; one nccl-tests row per size.

    Rows: {"size", "count", "dtype", "op", "algorithm", "time_us", "algbw_gbps", "busbw_gbps", "wrong"},
    sorted by size; "op" is "none" for allgather and broadcast, as in nccl-tests. Sizes too small to
    give every rank one element are left out. Raises ScenarioError on bad arguments or a missing
    extra (before any process starts) and BaselineError (one line) when a worker fails or the run
    passes `timeout_s`. Worker files go to `work_dir` if given, else to a temporary directory that is
    removed on success and kept (its path is in the error) on failure.
    """
    module = _module(name)
    common.validate(collective, dtype, op, ranks, sizes, iters, warmup)
    missing = module.available()
    if missing:
        raise ScenarioError(missing)
    lays = common.layouts(collective, sizes, ranks, dtype)
    if not lays:
        return []
    spec = {
        "collective": collective,
        "sizes": [lay.size_bytes for lay in lays],
        "dtype": dtype,
        "op": op,
        "iters": iters,
        "warmup": warmup,
        "timeout_s": timeout_s,
    }
    out_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix=f"playground-{name}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        per_rank = module.run(spec, ranks, out_dir)
    except KeyboardInterrupt:
        if work_dir is None:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    try:
        rows = common.combine(name, lays, dtype, op, per_rank)
    except ValueError as e:
        raise BaselineError(f"{name}: {e}; logs in {out_dir}") from None
    if work_dir is None:
        shutil.rmtree(out_dir, ignore_errors=True)
    return rows
