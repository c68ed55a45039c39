"""Pipeline model (lecture section 2.2): throughput is the bottleneck stage's, and filling and
draining the pipe leaves bubbles.

With stage times t_1..t_p and n items flowing through unbounded buffers, the makespan is
sum(t) + (n - 1) * max(t) (first item walks the whole chain, the rest leave one per bottleneck
period): 3 / 5 / 2 ms and 100 items give 10 + 99 x 5 = 505 ms, against 1000 ms one after another.
For p equal stages and m micro-batches the makespan is (p + m - 1) t while each stage is busy
m t, so the idle share (the bubble) is (p - 1) / (m + p - 1): 75%, 42.9%, 15.8%, 1.2% for
m = 1, 4, 16, 256 on 4 stages.
"""

import numpy as np

from playground.core.errors import UsageError


def pipeline_makespan_s(stage_s: tuple[float, ...] | list[float], num_items: int) -> float:
    """Time from the first item entering to the last leaving: sum(t) + (n - 1) max(t)."""
    if num_items <= 0:
        return 0.0
    return float(sum(stage_s) + (num_items - 1) * max(stage_s))


def sequential_time_s(stage_s: tuple[float, ...] | list[float], num_items: int) -> float:
    """Time without overlap: every item passes all stages before the next one starts."""
    return float(sum(stage_s) * num_items)


def bottleneck_throughput_per_s(stage_s: tuple[float, ...] | list[float]) -> float:
    """Steady-state items per second: one per slowest-stage period."""
    return 1.0 / max(stage_s)


def bubble_fraction(num_stages: int, num_micro_batches: int) -> float:
    """Idle share of p equal stages over m micro-batches: (p - 1) / (m + p - 1)."""
    if num_stages < 1 or num_micro_batches < 1:
        raise UsageError(f"need >= 1 stage and micro-batch, got {num_stages}, {num_micro_batches}")
    return (num_stages - 1) / (num_micro_batches + num_stages - 1)


def measured_bubble_fraction(busy_s_per_stage: list[float], makespan_s: float) -> float:
    """1 - (total busy time) / (stages x makespan): the same definition, from measured times."""
    if makespan_s <= 0:
        raise UsageError(f"makespan must be > 0, got {makespan_s}")
    return 1.0 - sum(busy_s_per_stage) / (len(busy_s_per_stage) * makespan_s)


def pipeline_schedule_s(stage_s: tuple[float, ...] | list[float], num_items: int) -> np.ndarray:
    """End time of every (stage, item) with unbounded buffers and items ready at time 0:
    end[s, i] = max(end[s - 1, i], end[s, i - 1]) + t_s. Shape (stages, items)."""
    end = np.zeros((len(stage_s), num_items))
    for s, t in enumerate(stage_s):
        for i in range(num_items):
            ready = end[s - 1, i] if s else 0.0
            free = end[s, i - 1] if i else 0.0
            end[s, i] = max(ready, free) + t
    return end
