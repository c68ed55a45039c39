"""Compute/communication overlap: the two-stage pipeline model and the measures of a step.

Backward produces gradients bucket by bucket; a communication thread all-reduces bucket b as
soon as it is ready, while compute goes on with the next layers (DDP's hooks, lecture P4
section 3.5). This is a two-stage pipeline: the all-reduce of bucket b starts at
max(ready_b, end of all-reduce b-1). With equal chunks of compute c and communication m the
step takes c + (n-1) * max(c, m) + m instead of n * (c + m): when compute is the slower stage
communication is almost entirely hidden; when communication is slower it sets the step time.

Measures of one step (all in seconds):
- exposed communication = step - compute: the time the step was not computing (waiting for
  the last all-reduces); it equals all of the communication when nothing overlaps;
- hidden communication = compute + communication - step: what ran at the same time as compute;
- overlap efficiency = hidden / communication (1.0 = fully hidden).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError


def pipeline_step_s(compute_s: Sequence[float], comm_s: Sequence[float]) -> float:
    """Step time when bucket b's all-reduce (comm_s[b]) starts as soon as both its gradients
    (after compute_s[0..b]) and the previous all-reduce are done. One communication stream."""
    if len(compute_s) != len(comm_s):
        raise UsageError(f"got {len(compute_s)} compute times but {len(comm_s)} communication times")
    ready = 0.0
    comm_end = 0.0
    for c, m in zip(compute_s, comm_s, strict=True):
        ready += c
        comm_end = max(ready, comm_end) + m
    return max(ready, comm_end)


def serial_step_s(compute_s: Sequence[float], comm_s: Sequence[float]) -> float:
    """Step time when all communication waits for the end of backward."""
    return sum(compute_s) + sum(comm_s)


@dataclass(frozen=True)
class StepTimes:
    """One measured step: wall time, time spent computing, time spent all-reducing."""

    step_s: float
    compute_s: float
    comm_s: float

    @property
    def exposed_comm_s(self) -> float:
        return max(0.0, self.step_s - self.compute_s)

    @property
    def hidden_comm_s(self) -> float:
        return max(0.0, min(self.comm_s, self.compute_s + self.comm_s - self.step_s))

    @property
    def overlap_efficiency(self) -> float:
        return self.hidden_comm_s / self.comm_s if self.comm_s > 0 else 0.0
