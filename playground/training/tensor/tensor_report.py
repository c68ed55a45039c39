"""The tensor-parallel training run's report: per t (a data x tensor grid of the same ranks) the step
and its phases, the tensor all-reduces' share, the model beside it (`steptime_model`), the gaps to one
process; torch.distributed.tensor.parallel beside it when it ran; step time against t drawn.

A step ends with its slowest rank, so each step is read from the rank whose step took longest; a
run's figure is the median over its timed steps (all but the first), with their min-max.

The report fails the run if a run's parameters drifted from one process's by more than
`training.loop.TOLERANCE` (relative to the largest parameter) or its losses by more than `LOSS_TOLERANCE`.
"""

import math
import statistics
from pathlib import Path

from playground.core.machine import load_note, usable_cores
from playground.display.plot import figure
from playground.display.report import Report, Table
from playground.models.calibration import load_model, run_network
from playground.training.loop import gap_failures, one_process_note
from playground.training.tensor.steptime_model import predict_step_s
from playground.training.training_stats import relative_gaps, slowest_steps, timed_steps

RUN_COLUMNS = {
    "t": "t",
    "grid": "grid (data x tensor)",
    "step_ms": "step (ms)",
    "step_range": "min-max",
    "model_ms": "model",
    "compute_ms": "compute",
    "tensor_ms": "tensor all-reduce",
    "tensor_model_ms": "model",
    "tensor_calls": "calls",
    "data_ms": "data comm",
    "optimizer_ms": "optimizer",
    "param_gap": "params vs 1 process",
    "loss_gap": "loss gap",
}
TORCH_COLUMNS = {
    "t": "t",
    "loss_ours": "loss (ours)",
    "loss_torch": "loss (torch)",
    "loss_gap": "max rel. gap",
    "step_ours_ms": "step ours (ms)",
    "step_torch_ms": "step torch (ms)",
}


def run_figures(results: list[dict], k: int) -> dict:
    """Run `k` of every rank: its grid, the medians of the slowest rank's timed steps, the worst gaps."""
    records = [r["runs"][k] for r in results]
    first = records[0]
    slowest = slowest_steps([rec["steps"] for rec in records])
    timed = [slowest[i] for i in timed_steps(len(slowest))]

    def median(key: str) -> float:
        return statistics.median(s[key] for s in timed)

    steps = [s["step_s"] for s in timed]
    gaps = [rec["reference"] for rec in records if rec.get("reference")]
    return {
        "tensor": first["tensor"],
        "data": first["data"],
        "rows": first["rows"],
        "params_bytes": max(rec["params_bytes"] for rec in records),
        "bucket_bytes": first["bucket_bytes"],
        "step_s": median("step_s"),
        "step_min_s": min(steps),
        "step_max_s": max(steps),
        "compute_s": median("forward_s") + median("backward_s") - median("tensor_s"),
        "tensor_s": median("tensor_s"),
        "tensor_calls": timed[0]["tensor_calls"],
        "comm_s": median("comm_s"),
        "optimizer_s": median("optimizer_s"),
        "losses": [s["loss"] for s in records[0]["steps"]],
        "param_gap": max((g["param_gap"] for g in gaps), default=None),
        "loss_gap": max((g["loss_gap"] for g in gaps), default=None),
        "plans": sorted({rec["plan"] for rec in records}),
    }


def _row(f: dict, model: dict | None) -> dict:
    nan = math.nan
    return {
        "t": f["tensor"],
        "grid": f"{f['data']} x {f['tensor']}",
        "step_ms": 1e3 * f["step_s"],
        "step_range": f"{1e3 * f['step_min_s']:.1f}-{1e3 * f['step_max_s']:.1f}",
        "model_ms": nan if model is None else 1e3 * model["step_s"],
        "compute_ms": 1e3 * f["compute_s"],
        "tensor_ms": 1e3 * f["tensor_s"],
        "tensor_model_ms": nan if model is None else 1e3 * model["tensor_s"],
        "tensor_calls": f["tensor_calls"],
        "data_ms": 1e3 * f["comm_s"],
        "optimizer_ms": 1e3 * f["optimizer_s"],
        "param_gap": nan if f["param_gap"] is None else f["param_gap"],
        "loss_gap": nan if f["loss_gap"] is None else f["loss_gap"],
        "losses": f["losses"],
    }


def failures_of(f: dict, dtype: str) -> list[str]:
    return gap_failures(f"t={f['tensor']}", f["param_gap"], f["loss_gap"], dtype)


def plot_step_times(path: Path, rows: list[dict], title: str, torch_rows: list[dict] | None) -> None:
    """Step time against t: measured (with its min-max), the model, torch's if it ran."""
    with figure(path, (7, 4.5)) as (_, ax):
        ts = [r["t"] for r in rows]
        # the range is printed to 0.1 ms, so an end can round past the median: clamp at 0
        lo = [max(0.0, r["step_ms"] - float(r["step_range"].split("-")[0])) for r in rows]
        hi = [max(0.0, float(r["step_range"].split("-")[1]) - r["step_ms"]) for r in rows]
        ax.errorbar(ts, [r["step_ms"] for r in rows], yerr=[lo, hi], fmt="o-", capsize=3, label="measured")
        ax.plot(ts, [r["model_ms"] for r in rows], "x--", label="model: compute / t + alpha-beta all-reduces")
        ax.plot(ts, [r["tensor_ms"] for r in rows], "s:", label="of which tensor all-reduces (measured)")
        if torch_rows:
            ax.plot(
                [r["t"] for r in torch_rows], [r["step_torch_ms"] for r in torch_rows], "d-.", label="torch"
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.set_xlabel("tensor-parallel ranks t (the rest data-parallel)")
        ax.set_ylabel("step (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)


def torch_table(torch_records: list[list[dict]], rows: list[dict]) -> tuple[list[dict], list[float]]:
    """One row per t: the last step's loss of each, the largest relative loss gap over the steps, the
    median step time of the timed steps (slowest rank) of each; and every gap."""
    out, every_gap = [], []
    for k, row in enumerate(rows):
        per_rank = [[r for r in records if r["run"] == k] for records in torch_records]
        losses = [r["loss"] for r in per_rank[0]]
        gaps = relative_gaps(row["losses"], losses)
        every_gap += gaps
        slowest = [max(records[i]["step_s"] for records in per_rank) for i in timed_steps(len(per_rank[0]))]
        out.append(
            {
                "t": row["t"],
                "loss_ours": row["losses"][-1],
                "loss_torch": losses[-1],
                "loss_gap": max(gaps),
                "step_ours_ms": row["step_ms"],
                "step_torch_ms": 1e3 * statistics.median(slowest),
            }
        )
    return out, every_gap


def report(
    results: list[dict], params, run_dir: Path, torch_records: list[list[dict]] | None = None
) -> Report:
    run_dir, config = Path(run_dir), params.model_config
    source = load_model(params.model, run_network(run_dir))
    figures = [run_figures(results, k) for k in range(len(results[0]["runs"]))]
    base = min(figures, key=lambda f: f["tensor"])
    rows = [
        _row(
            f,
            predict_step_s(
                config, base, f, params.mode, source.link, params.algorithm, params.tensor_algorithm
            ),
        )
        for f in figures
    ]
    failures = [line for f in figures for line in failures_of(f, params.dtype)]
    cores = usable_cores()
    title = (
        f"tensor parallelism on {len(results)} ranks ({cores} cores), {config.num_params:,} parameters "
        f"({params.dtype}), global batch {params.batch} x {params.context}"
    )
    tables = [
        Table(
            f"{title}, {params.steps} steps per t, mode {params.mode.name} over the data group: "
            "median of the timed steps (slowest rank)",
            [{k: v for k, v in r.items() if k != "losses"} for r in rows],
            RUN_COLUMNS,
        )
    ]
    data = {"runs": rows, "plans": [f["plans"] for f in figures], "model": source.to_dict(), "cores": cores}
    notes = [
        "plans: " + "; ".join(f"t={f['tensor']}: {', '.join(f['plans'])}" for f in figures),
        f"model: the t={base['tensor']} run's compute x (rows / t) scaled, the optimizer by the shard's "
        f"parameters, 4 all-reduces per block of rows x context x d on the link of the {source.caption}, "
        "and the mode's collectives over the data group",
    ]
    notes += one_process_note(
        rows, "the shards' partial products are summed in another order than one process's matrix products"
    )
    torch_rows = None
    if torch_records is not None:
        torch_rows, loss_gaps = torch_table(torch_records, rows)
        tables.append(
            Table(
                "ours against torch.distributed.tensor.parallel (ColwiseParallel / RowwiseParallel, DTensor) "
                "over Gloo, same weights and batches",
                torch_rows,
                TORCH_COLUMNS,
            )
        )
        data["torch"] = torch_rows
        notes.append(f"torch.distributed.tensor.parallel: largest relative loss gap {max(loss_gaps):.2e}")
    plot_step_times(run_dir / "tensor-steps.png", rows, title, torch_rows)
    files = ["tensor-steps.png"]
    notes.append(f"plot: {', '.join(files)}")
    notes.append(load_note())
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=files)
