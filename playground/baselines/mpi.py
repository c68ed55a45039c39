"""The MPI baseline: the same collective through mpi4py, launched with `mpiexec -n N` (MPICH).

MPI is the reference for CPU collectives. This is the parent side: one `mpiexec` in its own process
group (so a timeout or Ctrl-C takes its proxies and ranks with it), then the ranks' JSON records
become nccl-tests rows. mpi4py is imported only by the workers, so this module imports without it.

MPICH busy-polls while it waits. With more ranks than cores the spinning ranks steal the core from
the one that has work, so its times at 4-8 ranks on a 2-core machine say more about the scheduler
than about MPI; see docs/baselines.md.
"""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

from playground.launcher.procs import run_workers, worker_env

INSTALL_HINT = "mpi4py or mpiexec not found: apt-get install mpich && pip install --no-binary mpi4py mpi4py"


def available() -> str | None:
    """None if mpi4py and an mpiexec can be found; else the one line that says how to install them."""
    if importlib.util.find_spec("mpi4py") is None or shutil.which("mpiexec") is None:
        return INSTALL_HINT
    return None


def run(spec: dict, ranks: int, out_dir: Path) -> list[list[dict]]:
    cmd = [
        shutil.which("mpiexec") or "mpiexec",
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "playground.baselines.mpi_worker",
        "--spec",
        json.dumps(spec),
        "--out",
        str(out_dir),
    ]
    return run_workers("mpi", [cmd], [worker_env({})], out_dir, ranks, spec["timeout_s"])
