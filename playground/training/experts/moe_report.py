"""The expert-parallel run's report: per routing workload the loads (assignments per expert and rows per
rank, max / mean, drops) and whether they equal one process's; per workload and permutation the step
and its split beside the model (`steptime_model`); the permutation's two ways side by side; the split
drawn (`plots`).

The report fails the run if a run's parameters drifted from one process's by more than
`training.loop.TOLERANCE`, its losses by more than `LOSS_TOLERANCE`, or it routed or dropped a single
assignment differently from one process.
"""

import math
from pathlib import Path

from playground.core.machine import load_note, usable_cores
from playground.display.report import Report, Table
from playground.models.calibration import load_model, run_network
from playground.training.experts import plots
from playground.training.experts.moe_stats import run_figures
from playground.training.experts.steptime_model import exchange_s, predict_step_s, seconds_per_row
from playground.training.loop import gap_failures, one_process_note

LOAD_COLUMNS = {
    "workload": "workload",
    "per_expert": "assignments per expert",
    "per_rank": "rows per rank",
    "expert_imbalance": "max/mean expert",
    "rank_imbalance": "max/mean rank",
    "drop_pct": "dropped %",
    "same_routing": "as 1 process",
}
SPLIT_COLUMNS = {
    "workload": "workload",
    "permute": "permute",
    "step_ms": "step (ms)",
    "router_ms": "router",
    "permute_ms": "permute",
    "alltoall_ms": "all-to-all",
    "experts_ms": "experts",
    "unpermute_ms": "un-permute",
    "rest_ms": "rest",
}
SPLIT_LEGEND = {"rest_ms": "attention, embeddings, the head, the gradients' reductions and Adam"}
MODEL_COLUMNS = {
    "workload": "workload",
    "permute": "permute",
    "step_ms": "step (ms)",
    "model_ms": "model",
    "slowest_experts_ms": "experts, slowest rank",
    "model_experts_ms": "model",
    "exchange_ms": "all-to-all, no wait",
    "model_alltoall_ms": "model",
    "param_gap": "params vs 1 process",
}
MODEL_LEGEND = {
    "slowest_experts_ms": "the experts' time of the rank whose experts took longest",
    "exchange_ms": "each all-to-all as the last rank to arrive timed it (the others wait there for it), summed",
}
STEP_LOAD_COLUMNS = {
    "workload": "workload",
    "step": "step",
    "hottest": "hottest expert",
    "hottest_share": "its share %",
    "expert_imbalance": "max/mean expert",
    "rank_imbalance": "max/mean rank",
    "drop_pct": "dropped %",
}
PERMUTE_COLUMNS = {
    "workload": "workload",
    "sorted_ms": "sorted (ms)",
    "gathered_ms": "gathered (ms)",
    "ratio": "gathered / sorted",
    "step_ratio": "step, gathered / sorted",
}


def _counts(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values)


def load_row(f: dict) -> dict:
    return {
        "workload": f["workload"],
        "per_expert": _counts(f["per_expert"]),
        "per_rank": _counts(f["per_rank"]),
        "expert_imbalance": f["expert_imbalance"],
        "rank_imbalance": f["rank_imbalance"],
        "drop_pct": 100 * f["drop_rate"],
        "same_routing": "-" if f["same_routing"] is None else ("yes" if f["same_routing"] else "NO"),
    }


def step_load_rows(f: dict) -> list[dict]:
    """Each step's loads of a run: its hottest expert and that expert's share of the assignments."""
    rows = []
    for step, loads in enumerate(f["step_loads"]):
        per_expert = loads["per_expert"]
        hottest = max(range(len(per_expert)), key=per_expert.__getitem__)
        rows.append(
            {
                "workload": f["workload"],
                "step": step,
                "hottest": hottest,
                "hottest_share": 100 * per_expert[hottest] / sum(per_expert) if sum(per_expert) else 0.0,
                "expert_imbalance": loads["expert_imbalance"],
                "rank_imbalance": loads["rank_imbalance"],
                "drop_pct": 100 * loads["drop_rate"],
            }
        )
    return rows


def step_row(f: dict, model: dict) -> dict:
    ms = {
        f"{p}_ms": 1e3 * f[f"{p}_s"]
        for p in ("step", "router", "permute", "alltoall", "experts", "unpermute", "rest")
    }
    return {
        "workload": f["workload"],
        "permute": f["permute"],
        **ms,
        "model_ms": 1e3 * model["step_s"],
        "model_alltoall_ms": 1e3 * model["alltoall_s"],
        "slowest_experts_ms": 1e3 * max(f["rank_experts_s"]),
        "exchange_ms": 1e3 * exchange_s(f["exchanges"]),
        "model_experts_ms": 1e3 * model["experts_s"],
        "param_gap": math.nan if f["param_gap"] is None else f["param_gap"],
        "loss_gap": math.nan if f["loss_gap"] is None else f["loss_gap"],
    }


def permute_rows(figures: list[dict]) -> list[dict]:
    """Per workload run both ways: the permutation's time (permute + un-permute) sorted and gathered."""
    by = {(f["workload"], f["permute"]): f for f in figures}
    rows = []
    for workload in dict.fromkeys(f["workload"] for f in figures):
        if (workload, "sorted") not in by or (workload, "gathered") not in by:
            continue
        s, g = by[(workload, "sorted")], by[(workload, "gathered")]
        moved = [x["permute_s"] + x["unpermute_s"] for x in (s, g)]
        rows.append(
            {
                "workload": workload,
                "sorted_ms": 1e3 * moved[0],
                "gathered_ms": 1e3 * moved[1],
                "ratio": moved[1] / moved[0] if moved[0] else math.nan,
                "step_ratio": g["step_s"] / s["step_s"] if s["step_s"] else math.nan,
            }
        )
    return rows


def failures_of(f: dict, dtype: str) -> list[str]:
    name = f"{f['workload']} ({f['permute']})"
    out = gap_failures(name, f["param_gap"], f["loss_gap"], dtype)
    if f["same_routing"] is False:
        out.append(f"{name}: routed or dropped other assignments than one process")
    return out


def calibration_run(figures: list[dict]) -> dict:
    """The run whose experts' seconds per row price every run's: balanced (sorted) if it ran."""
    for f in figures:
        if f["workload"] == "balanced" and f["permute"] == "sorted":
            return f
    return next((f for f in figures if f["workload"] == "balanced"), figures[0])


def report(results: list[dict], params, run_dir: Path) -> Report:
    """The MoE run's report: per workload its loads, the step's split beside the model, the
    permutation both ways, the gaps to one process, the plot. (Longer than most: the tables in the
    order the page reads, each a call or two.)"""
    run_dir = Path(run_dir)
    source = load_model(params.model, run_network(run_dir))
    figures = [run_figures(results, k) for k in range(len(results[0]["runs"]))]
    base = calibration_run(figures)
    c_row = seconds_per_row(base)
    models = [predict_step_s(f, c_row, source.link) for f in figures]
    rows = [step_row(f, m) for f, m in zip(figures, models, strict=True)]
    first_of_workload = list({f["workload"]: f for f in reversed(figures)}.values())[::-1]
    loads = [load_row(f) for f in first_of_workload]
    per_step = [row for f in first_of_workload for row in step_load_rows(f)]
    failures = [line for f in figures for line in failures_of(f, params.dtype)]
    first = figures[0]
    ranks, moe = len(results), params.moe_config
    title = (
        f"{moe.experts} experts, top-{moe.top_k}, "
        + ("dropless" if moe.capacity_factor is None else f"capacity factor {moe.capacity_factor:g}")
        + f", on {ranks} ranks ({usable_cores()} cores) as {first['replicas']} x {first['expert_parallel']} "
        f"(replicas x expert group), global batch {params.batch} x {params.context} ({params.dtype})"
    )
    tables = [
        Table(f"{title}: loads per step (mean of the timed steps, all blocks)", loads, LOAD_COLUMNS),
        Table("loads step by step (all blocks)", per_step, STEP_LOAD_COLUMNS, keys=("workload", "step")),
        Table(
            "the step and its split: median of the timed steps, slowest rank (ms)",
            rows,
            SPLIT_COLUMNS,
            keys=("workload", "permute"),
            legend=SPLIT_LEGEND,
        ),
        Table(
            "the step beside its model: the slowest rank's experts and the all-to-alls' bytes (ms)",
            rows,
            MODEL_COLUMNS,
            keys=("workload", "permute"),
            legend=MODEL_LEGEND,
        ),
    ]
    permutes = permute_rows(figures)
    if permutes:
        tables.append(
            Table(
                "the permutation both ways: permute + un-permute (ms), tokens sorted by expert against "
                "gathered in place",
                permutes,
                PERMUTE_COLUMNS,
            )
        )
    plots.plot_split(run_dir / "moe-steps.png", rows, title)
    files = ["moe-steps.png"]
    notes = [
        "plans: " + ", ".join(first["plans"]),
        f"model: the step outside the experts and all-to-alls as measured, + the slowest rank's rows x "
        f"{1e6 * c_row:.2f} us a row (the {base['workload']} run's experts), + every all-to-all at its busiest "
        f"rank's bytes ({source.caption})",
        "loads: assignments per expert (kept), rows each rank's experts computed; dropped: of the routed "
        "assignments, those past an expert's capacity in their sequence",
        *one_process_note(rows, "the ranks sum their rows' gradients in another order than one process"),
        f"plot: {', '.join(files)}",
        load_note(),
    ]
    data = {
        "runs": rows,
        "loads": loads,
        "step_loads": per_step,
        "permute": permutes,
        "model": source.to_dict(),
        "c_row_s": c_row,
    }
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=files)
