"""A user node that stands beside other tests' runs: it sends rank 0 -> 1 through the shared-memory
rings (so its /dev/shm directory holds ring files, as any other shm run's does), writes
`ready-<rank>` into the run directory, then waits for Ctrl-C."""

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from playground.collectives import allreduce


@dataclass(frozen=True)
class Params:
    wait_s: float = 300.0  # the launcher stops it long before (the test's Ctrl-C)


def main(comm, params):
    allreduce(comm, np.ones(4096))  # with PLAYGROUND_SHM_MIN_BYTES=8: through the rings, 0-1 among them
    (Path(os.environ["PLAYGROUND_RUN_DIR"]) / f"ready-{comm.rank}").touch()
    threading.Event().wait(params.wait_s)
    return {"ok": False, "error": "nobody stopped this run"}
