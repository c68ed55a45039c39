"""The expert-parallel run's figures from what the ranks returned: per run (a workload and a
permutation), the loads (assignments per expert and rows per rank, their max / mean, the drop rate),
the step and its split read from the slowest rank, each rank's experts' time, and whether the run
routed and dropped exactly what one process did.

A step ends with its slowest rank, so each step is read from the rank whose step took longest (the
training lab's `slowest_steps`); a run's figure is the median over its timed steps (all but the
first). Loads are summed over the blocks and over the ranks (every rank routes its own tokens) and
averaged over the timed steps: assignments per step.
"""

import statistics

import numpy as np

from playground.training.training_stats import slowest_steps, timed_steps
from playground.transformer.moe import PHASES


def _median(steps: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in steps)


def load_figures(per_rank: list[list[dict]], steps: range) -> dict:
    """Assignments per expert (kept, summed over blocks and ranks) and rows per rank, each the mean
    over `steps`; their max / mean; the share of routed assignments dropped."""
    kept = np.mean([np.sum([r[s]["kept"] for r in per_rank], axis=(0, 1)) for s in steps], axis=0)
    routed = np.mean([np.sum([r[s]["routed"] for r in per_rank], axis=(0, 1)) for s in steps], axis=0)
    rows = np.mean([[sum(r[s]["received"]) for r in per_rank] for s in steps], axis=0)
    return {
        "per_expert": kept.tolist(),
        "per_rank": rows.tolist(),
        "expert_imbalance": float(kept.max() / kept.mean()) if kept.mean() else float("nan"),
        "rank_imbalance": float(rows.max() / rows.mean()) if rows.mean() else float("nan"),
        "drop_rate": float(1 - kept.sum() / routed.sum()) if routed.sum() else 0.0,
    }


def same_routing(per_rank: list[list[dict]], reference: list[dict]) -> bool:
    """Every step's assignments per block and expert, routed and kept, summed over the ranks, equal
    one process's (`loop.OneProcessMoE.loads`): the same tokens went to the same experts and the
    same ones were dropped."""
    for s, ref in enumerate(reference):
        for key in ("routed", "kept"):
            if np.sum([r[s][key] for r in per_rank], axis=0).tolist() != ref[key]:
                return False
    return True


def run_figures(results: list[dict], k: int) -> dict:
    """Run `k` of every rank: its workload, grid, loads, the slowest rank's step and phases (medians
    of the timed steps), each rank's experts' time and rows, the gaps to one process."""
    records = [r["runs"][k] for r in results]
    first = records[0]
    per_rank = [rec["steps"] for rec in records]
    steps = timed_steps(len(per_rank[0]))
    slowest = slowest_steps(per_rank)
    timed = [slowest[i] for i in steps]
    phases = {p: _median(timed, f"{p}_s") for p in PHASES}
    gaps = [rec["reference"] for rec in records if rec.get("reference")]
    reference_loads = gaps[0].get("loads") if gaps else None
    return {
        "workload": first["workload"],
        "permute": first["permute"],
        "expert_parallel": first["expert_parallel"],
        "replicas": first["replicas"],
        "step_s": _median(timed, "step_s"),
        "step_min_s": min(s["step_s"] for s in timed),
        "step_max_s": max(s["step_s"] for s in timed),
        **{f"{p}_s": v for p, v in phases.items()},
        "rest_s": _median(timed, "step_s") - sum(phases.values()),  # attention, the reductions, Adam
        "rank_experts_s": [statistics.median(r[i]["experts_s"] for i in steps) for r in per_rank],
        "rank_rows": [statistics.mean(sum(r[i]["received"]) for i in steps) for r in per_rank],
        "exchanges": [[r[i]["exchanges"] for r in per_rank] for i in steps],  # step -> rank -> calls
        "losses": [s["loss"] for s in per_rank[0]],
        "aux_loss": statistics.median(sum(r[i]["aux_loss"] for r in per_rank) for i in steps),
        **load_figures(per_rank, steps),
        "step_loads": [load_figures(per_rank, range(i, i + 1)) for i in range(len(per_rank[0]))],
        "same_routing": None if reference_loads is None else same_routing(per_rank, reference_loads),
        "param_gap": max((g["param_gap"] for g in gaps), default=None),
        "loss_gap": max((g["loss_gap"] for g in gaps), default=None),
        "plans": sorted({rec["plan"] for rec in records}),
    }
