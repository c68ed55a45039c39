"""A pipeline of stage processes passing items over ZeroMQ: the bottleneck sets the throughput,
filling and draining leave bubbles (lecture 2.2).

Each rank is one stage: receive an item from the previous rank, work on it for the stage's time,
send it on (rank 0 makes the items). Every stage stamps when it starts and ends each item, so
the launcher can compute the makespan, the steady period at the sink (= the bottleneck's time),
each stage's busy share, and the bubble 1 - busy / (stages x makespan).

Two experiments: (1) the lecture's 3 / 5 / 2 ms chain on 100 items, then the same chain with
the first (non-bottleneck) stage twice as fast, then with the bottleneck twice as fast;
(2) all ranks as equal stages over 1, 4, 16, 256 micro-batches against (p - 1) / (m + p - 1).
Stage work is a sleep by default (like waiting on a GPU: no CPU used, so 4 stages fit on 2
cores); work=spin makes it CPU work and shows oversubscription.
"""

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.core.machine import set_timer_slack_ns, sleep_until
from playground.display.report import Report
from playground.queueing import pipeline_report

TAG_ITEM = 7


@dataclass(frozen=True)
class Params:
    stage_ms: tuple[float, ...] = (3.0, 5.0, 2.0)  # experiment 1: ms per item of each stage, one rank each
    num_items: int = 100  # experiment 1: items through each chain
    # experiment 1: also run the chain with a non-bottleneck stage, then the bottleneck, 2x faster
    speedup_variants: bool = True
    bubble_stage_ms: float = 4.0  # experiment 2: ms per item of every stage
    # experiment 2: items (micro-batches m) through all ranks as equal stages, one run each; the
    # bubble beside (p - 1) / (m + p - 1)
    micro_batches: tuple[int, ...] = (1, 4, 16, 256)
    payload_bytes: int = 1024  # each item's message from stage to stage (rounded down to 8-byte words)
    # sleep: a stage waits its time out, using no CPU (like waiting on a GPU); spin: busy-waits, so
    # stages beyond the cores take turns
    work: Literal["sleep", "spin"] = "sleep"
    spin_tail_ms: float = 0.3  # sleep: ms at the end of each item spun, not slept, to end on time (0: none)
    compensate: bool = True  # a stage that woke up late shortens its next items, keeping its mean time

    def __post_init__(self):
        if not self.stage_ms or any(t <= 0 for t in self.stage_ms):
            raise ParamError("stage_ms", f"each must be > 0, got {list(self.stage_ms)}")
        if self.num_items < 2:
            raise ParamError("num_items", f"must be >= 2, got {self.num_items}")
        if self.bubble_stage_ms <= 0:
            raise ParamError("bubble_stage_ms", f"must be > 0, got {self.bubble_stage_ms}")
        if not self.micro_batches or any(m < 1 for m in self.micro_batches):
            raise ParamError("micro_batches", f"each must be >= 1, got {list(self.micro_batches)}")
        if self.payload_bytes < 8:
            raise ParamError("payload_bytes", f"must be >= 8, got {self.payload_bytes}")

    def chains(self) -> list[tuple[str, tuple[float, ...]]]:
        """(name, stage times in ms) of experiment 1."""
        out = [("as given", self.stage_ms)]
        if self.speedup_variants and len(self.stage_ms) > 1:
            slow = int(np.argmax(self.stage_ms))
            other = 0 if slow != 0 else 1
            out.append(
                (
                    f"stage {other} 2x faster",
                    tuple(t / 2 if i == other else t for i, t in enumerate(self.stage_ms)),
                )
            )
            out.append(
                (
                    f"bottleneck (stage {slow}) 2x faster",
                    tuple(t / 2 if i == slow else t for i, t in enumerate(self.stage_ms)),
                )
            )
        return out


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < max(2, len(params.stage_ms)):
        raise ParamError(
            "ranks", f"need one rank per stage, at least {max(2, len(params.stage_ms))}, got {ranks}"
        )


def run_chain(
    comm,
    stage_s: tuple[float, ...],
    num_items: int,
    payload_bytes: int,
    work: str,
    spin_tail_s: float,
    compensate: bool = True,
) -> dict | None:
    """This rank's part of one pipeline run: (start, end) stamps of each item it worked on.

    With `compensate`, time overslept on one item is taken off the next ones, so a stage's mean
    time stays what was asked even when the shared machine wakes it up late."""
    comm.barrier()
    rank, last = comm.rank, len(stage_s) - 1
    if rank > last:
        return None
    starts, ends = np.empty(num_items), np.empty(num_items)
    item = np.zeros(payload_bytes // 8)
    tail = stage_s[rank] if work == "spin" else spin_tail_s
    want, debt = stage_s[rank], 0.0
    for i in range(num_items):
        if rank > 0:
            item = comm.recv(rank - 1, TAG_ITEM)
        t0 = time.monotonic()
        sleep_until(t0 + want - (min(debt, want) if compensate else 0.0), tail)
        starts[i], ends[i] = t0, time.monotonic()
        debt += ends[i] - t0 - want
        if rank < last:
            comm.send(item, rank + 1, TAG_ITEM)
    return {"starts": starts.tolist(), "ends": ends.tolist()}


def main(comm, params: Params) -> dict:
    set_timer_slack_ns(1)
    p = params
    chains = p.chains()
    total = len(chains) + len(p.micro_batches)
    out: dict = {"ok": True, "chains": [], "bubbles": []}
    for k, (name, stage_ms) in enumerate(chains):
        stamps = run_chain(
            comm,
            tuple(t / 1000 for t in stage_ms),
            p.num_items,
            p.payload_bytes,
            p.work,
            p.spin_tail_ms / 1000,
            p.compensate,
        )
        out["chains"].append({"name": name, "stage_ms": list(stage_ms), "stamps": stamps})
        comm.progress(k + 1, total, "pipeline runs")
    equal = tuple([p.bubble_stage_ms / 1000] * comm.size)
    for j, m in enumerate(p.micro_batches):
        stamps = run_chain(comm, equal, m, p.payload_bytes, p.work, p.spin_tail_ms / 1000, p.compensate)
        out["bubbles"].append({"micro_batches": m, "stamps": stamps})
        comm.progress(len(chains) + j + 1, total, "pipeline runs")
    return out


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return pipeline_report.report(results, params, run_dir)


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
