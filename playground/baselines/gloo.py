"""The Gloo baseline: the same collective through torch.distributed's "gloo" backend on CPU.

Gloo is what PyTorch uses for CPU tensors, so it is the natural yardstick for our ZeroMQ
collectives on one host. This module is the parent side: it starts N `gloo_worker` processes with
the env:// variables torchrun would set, on a free loopback port, and turns their JSON records into
nccl-tests rows. torch is imported only by the workers, so this module imports without it.
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


def run(spec: dict, ranks: int, out_dir: Path) -> list[list[dict]]:
    port = free_tcp_port()
    cmds, envs = [], []
    for rank in range(ranks):
        cmds.append(
            [
                sys.executable,
                "-m",
                "playground.baselines.gloo_worker",
                "--spec",
                json.dumps(spec),
                "--out",
                str(out_dir),
            ]
        )
        envs.append(
            worker_env(
                {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(ranks),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                }
            )
        )
    return run_workers("gloo", cmds, envs, out_dir, ranks, spec["timeout_s"])
