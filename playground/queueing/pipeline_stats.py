"""The pipeline lab's figures: per-stage (start, end) stamps of one run -> makespan, period at
the sink, busy shares and the bubble, with the formulas beside them (lecture 2.2).

Model: a chain of stages with times t_s takes sum(t) + (n - 1) max(t) for n items, so the sink
releases one item per max(t) (only the bottleneck matters); p equal stages over m micro-batches
sit idle (p - 1) / (m + p - 1) of the time. Stage times in `stage_ms` are milliseconds, stamps
seconds.
"""

import numpy as np

from playground.models import pipeline as pm

MS = 1000.0


def chain_stats(stamps: list[dict]) -> dict:
    """Makespan, sink period and busy shares from the per-stage stamps of one run (seconds);
    `stamps[s]` is stage s's {"starts": [...], "ends": [...]}, one entry per item."""
    starts = [np.array(s["starts"]) for s in stamps]
    ends = [np.array(s["ends"]) for s in stamps]
    makespan = float(ends[-1][-1] - starts[0][0])
    busy = [float(np.sum(e - s)) for s, e in zip(starts, ends, strict=True)]
    n = len(ends[-1])
    return {
        "makespan_s": makespan,
        # mean gap between items leaving the sink (not the median: a stage paying back a late
        # wake-up releases a short burst, and with few items the median can land inside it)
        "period_s": float(ends[-1][-1] - ends[-1][0]) / (n - 1) if n > 1 else float("nan"),
        "throughput_per_s": (len(ends[-1]) - 1) / float(ends[-1][-1] - ends[-1][0])
        if len(ends[-1]) > 1
        else float("nan"),
        "busy_s": busy,
        "mean_stage_s": [float(np.mean(e - s)) for s, e in zip(starts, ends, strict=True)],
        "bubble": pm.measured_bubble_fraction(busy, makespan),
    }


def chain_row(name: str, stage_ms: list[float], num_items: int, st: dict) -> dict:
    """One chain of experiment 1 (`st` from `chain_stats`) beside the makespan and period model."""
    model_T = pm.pipeline_makespan_s(stage_ms, num_items)
    return {
        "chain": name,
        "stages_ms": " / ".join(f"{t:g}" for t in stage_ms),
        "makespan_ms": st["makespan_s"] * MS,
        "model_makespan_ms": model_T,
        "dev_pct": 100 * (st["makespan_s"] * MS / model_T - 1),
        "sequential_ms": pm.sequential_time_s(stage_ms, num_items),
        "period_ms": st["period_s"] * MS,
        "model_period_ms": max(stage_ms),
        "throughput_per_s": st["throughput_per_s"],
        "model_per_s": pm.bottleneck_throughput_per_s(stage_ms) * 1000,
    }


def utilisation_rows(stage_ms: list[float], num_items: int, st: dict) -> list[dict]:
    """Per stage: its mean time and busy share of the makespan, beside t x n / model makespan."""
    model_T = pm.pipeline_makespan_s(stage_ms, num_items)
    return [
        {
            "stage": s,
            "stage_ms": t,
            "measured_stage_ms": st["mean_stage_s"][s] * MS,
            "busy_pct": 100 * st["busy_s"][s] / st["makespan_s"],
            "model_busy_pct": 100 * t * num_items / model_T,
        }
        for s, t in enumerate(stage_ms)
    ]


def bubble_row(micro_batches: int, num_stages: int, stage_ms: float, st: dict) -> dict:
    """One micro-batch count of experiment 2 (equal stages) beside (p - 1) / (m + p - 1); extra =
    what the formula leaves out (handing items on), per step of the m + p - 1 steps."""
    m = micro_batches
    model = pm.bubble_fraction(num_stages, m)
    model_T = pm.pipeline_makespan_s([stage_ms] * num_stages, m)
    return {
        "micro_batches": m,
        "bubble_pct": 100 * st["bubble"],
        "model_pct": 100 * model,
        "dev_points": 100 * (st["bubble"] - model),
        "makespan_ms": st["makespan_s"] * MS,
        "model_makespan_ms": model_T,
        "extra_ms": (st["makespan_s"] * MS - model_T),
        "extra_per_step_ms": (st["makespan_s"] * MS - model_T) / (m + num_stages - 1),
    }
