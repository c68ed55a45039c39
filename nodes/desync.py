"""Ranks that disagree: one rank calls a different collective, and every rank fails at once.

All ranks all-reduce `count` float32 elements `calls` times; at call number `at`, rank `rank` calls
something else: another op (max for sum), another dtype (int32 for float32: the same bytes), another
size (one element more), or another collective (a broadcast of the same buffer). Without a check this
is a hang until the timeout (another collective), or a silently wrong result (another op or dtype);
here the collective's fingerprint travels in its messages' tags and the first receive that meets the
other one names both sides (comm/desync.py), on every rank within a second, and the flight recorder's
dump says which collective the ranks first disagree on (`inspect RUN --flight`). `differ: none`
runs the same calls everywhere: the run succeeds.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.collectives import ReduceOp, allreduce, broadcast
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report, Table


@dataclass(frozen=True)
class Params:
    differ: Literal["none", "op", "dtype", "size", "collective"] = "op"  # what rank `rank` calls differently
    rank: int = 1  # the rank that calls it
    at: int = 3  # which call differs (from 1)
    calls: int = 5  # all-reduces in all
    count: int = 1024  # float32 elements of each

    def __post_init__(self):
        if self.calls < 1 or not 1 <= self.at <= self.calls:
            raise ParamError("at", f"must be a call number, 1 to calls ({self.calls}), got {self.at}")
        if self.count < 1:
            raise ParamError("count", f"must be >= 1, got {self.count}")


def check_scenario(params: Params, ranks: int) -> None:
    if not 0 <= params.rank < ranks:
        raise ParamError("params.rank", f"must be a rank, 0 to {ranks - 1}, got {params.rank}")


def main(comm, params: Params) -> dict:
    x = np.ones(params.count, dtype=np.float32)
    for call in range(1, params.calls + 1):
        if call == params.at and comm.rank == params.rank and params.differ != "none":
            odd_call(comm, x, params.differ)
        else:
            allreduce(comm, x)
    return {"ok": True, "calls": params.calls}


def odd_call(comm, x: np.ndarray, differ: str) -> None:
    """The one call that differs."""
    if differ == "op":
        allreduce(comm, x, op=ReduceOp.MAX)
    elif differ == "dtype":
        allreduce(comm, x.view(np.int32))
    elif differ == "size":
        allreduce(comm, np.ones(x.size + 1, dtype=x.dtype))
    else:
        broadcast(comm, x)


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    """Reached only when no rank failed: every rank made the same calls."""
    return Report(
        ok=True,
        tables=[Table("desync", [{"calls": params.calls, "differ": params.differ}])],
        notes=["every rank called the same collectives: nothing to name"],
    )


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
