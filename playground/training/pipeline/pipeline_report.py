"""The pipeline run's report: per schedule and micro-batch count the bubble (measured from the
trace, the model's, the formula's), the activations held against the formulas, the step time
against the model, the gaps to one process; each schedule drawn; torch.distributed.pipelining beside
it when it ran.

The model (`steptime_model`): each stage's calibrated forward and backward of one micro-batch, each
activation or gradient message alpha + bytes / beta on the run's link, a replica's stages sharing
its share of this machine's cores; then the tied embedding's message and the data-parallel mode's
collectives, and the optimizer as measured. The formula's bubble assumes equal stages, free
messages and a core per stage.

The report fails the run if a stage held other than its formula's bytes of activations, or if a
run's parameters drifted from one process's by more than `training.loop.TOLERANCE` (relative to the
largest).
"""

import math
import statistics
from pathlib import Path

from playground.comm.group import GridShape
from playground.core.machine import load_note, usable_cores
from playground.core.sizes import format_size
from playground.display.report import Report, Table
from playground.models.calibration import load_model, run_network
from playground.training.loop import gap_failures, one_process_note
from playground.training.pipeline import pipeline_stats as stats
from playground.training.pipeline.plots import plot_bubbles, plot_schedule
from playground.training.pipeline.steptime_model import after_pipeline_s
from playground.training.pipeline.torch_baseline import torch_rows
from playground.training.training_stats import timed_steps

RUN_COLUMNS = {
    "schedule": "schedule",
    "m": "m",
    "bubble_pct": "bubble measured (%)",
    "model_pct": "model (%)",
    "formula_pct": "(p-1)/(m+p-1) (%)",
    "held": "held per stage (micro-batches)",
    "held_formula": "formula",
    "pipeline_ms": "pipeline (ms)",
    "pipeline_model_ms": "model",
    "step_ms": "step (ms)",
    "step_model_ms": "model ",
    "param_gap": "params vs 1 process",
}
RUN_LEGEND = {
    "held": "micro-batches whose activations each stage held at once at most (stage 0 / 1 / ...), "
    "beside the schedule's formula",
    "param_gap": "largest parameter difference to one process on the whole batch, relative to "
    "the largest parameter",
}
MEMORY_COLUMNS = {
    "schedule": "schedule",
    "m": "m",
    "one": "one micro-batch, per stage",
    "held": "peak held per stage",
    "count": "formula: micro-batches x one",
    "equal": "equal",
}
TORCH_COLUMNS = {
    "schedule": "schedule",
    "m": "m",
    "loss_ours": "loss last step (ours)",
    "loss_torch": "(torch)",
    "loss_gap": "max rel. gap",
    "step_ours_ms": "step ours (ms)",
    "step_torch_ms": "step torch (ms)",
}


def _slash(values, fmt=str) -> str:
    return " / ".join(fmt(v) for v in values)


def _pct(x: float | None) -> float:
    return math.nan if x is None else 100 * x


def _ms(x: float | None) -> float:
    return math.nan if x is None else 1e3 * x


def run_row(f: dict, after_s: float) -> dict:
    """The run's row of the first table (and of result.json's `runs`, with more keys)."""
    held = f["held"]
    return {
        "schedule": f["schedule"],
        "m": f["m"],
        "bubble_pct": _pct(f["bubble"]),
        "model_pct": _pct(f["model_bubble"]),
        "formula_pct": _pct(f["formula_bubble"]),
        "ideal_pct": _pct(f["ideal_bubble"]),
        "held": _slash(h["micro_batches"] for h in held),
        "held_formula": _slash(h["formula_micro_batches"] for h in held),
        "pipeline_ms": _ms(f["makespan_s"]),
        "pipeline_model_ms": _ms(f["model_makespan_s"]),
        "step_ms": _ms(f["phases_s"]["step_s"]),
        "step_model_ms": _ms(f["model_makespan_s"] + after_s + f["phases_s"]["optimizer_s"]),
        "param_gap": math.nan if f["param_gap"] is None else f["param_gap"],
        "loss_gap": math.nan if f["loss_gap"] is None else f["loss_gap"],
        "bitwise": f["bitwise"],
        "held_bytes": [h["bytes"] for h in held],
        "formula_bytes": [h["formula_bytes"] for h in held],
        "idle_ms": None if f["idle_s"] is None else [_ms(x) for x in f["idle_s"]],
        "phases_ms": {k: _ms(v) for k, v in f["phases_s"].items()},
        "losses": f["losses"],
    }


def memory_row(f: dict) -> dict:
    held = f["held"]
    return {
        "schedule": f["schedule"],
        "m": f["m"],
        "one": _slash((h["formula_bytes"] // h["formula_micro_batches"] for h in held), format_size),
        "held": _slash((h["bytes"] for h in held), format_size),
        "count": _slash(h["formula_micro_batches"] for h in held),
        "equal": all(h["bytes"] == h["formula_bytes"] for h in held),
    }


def failures_of(f: dict, dtype: str) -> list[str]:
    """Activations held other than the formula's, parameters beyond `loop.TOLERANCE` of one process."""
    out = []
    name = f"{f['schedule']} m={f['m']}"
    if not all(h["bytes"] == h["formula_bytes"] for h in f["held"]):
        got, want = [h["bytes"] for h in f["held"]], [h["formula_bytes"] for h in f["held"]]
        out.append(f"{name}: activations held per stage {got} bytes, the formula says {want}")
    return out + gap_failures(name, f["param_gap"], None, dtype)


def report(
    results: list[dict], params, run_dir: Path, torch_records: list[list[dict]] | None = None
) -> Report:
    """The runs' table and their activations' (`run_row`, `memory_row`), the schedules drawn
    (`plots`), the data (`run_data`), the notes on the model, the messages and one process
    (`model_notes`); torch.distributed.pipelining's table when it ran."""
    run_dir, p, config = Path(run_dir), params.pipeline, params.model_config
    shape = GridShape(len(results) // p, p)
    results = sorted(results, key=lambda r: (r["stage"], r["data_index"]))
    events = stats.load_events(run_dir)
    traced = stats.traced_actions(events, shape)
    source = load_model(params.model, run_network(run_dir))
    cores = usable_cores()
    row_bytes = config.context * config.d_model * config.np_dtype.itemsize
    figures = [
        stats.run_figures(results, k, params.steps, shape, traced, source.link, cores, row_bytes)
        for k in range(len(results[0]["runs"]))
    ]
    after_s = after_pipeline_s(params.setup(), params.mode, p, shape.data, source.link)
    rows = [run_row(f, after_s) for f in figures]
    replicas = f"{shape.data} replica{'s' if shape.data > 1 else ''}"
    tables = [
        Table(
            f"pipeline parallelism, {p} stages x {replicas} ({len(results)} ranks), {config.num_params:,} "
            f"parameters ({params.dtype}), global batch {params.batch} x {params.context}, {params.steps} steps "
            "per run: median of the timed steps",
            rows,
            RUN_COLUMNS,
            legend=RUN_LEGEND,
        ),
        Table(
            "activations held for backward (the arrays' bytes, counted as kept and dropped)",
            [memory_row(f) for f in figures],
            MEMORY_COLUMNS,
        ),
    ]
    files = plots(run_dir, figures, rows, traced, params, cores)
    data = run_data(results, rows, shape, config.num_params, source, cores)
    hops = stats.waiting_hops_s(events, tuple(results[0]["pipeline_tags"]))
    if hops:
        data["hop_ms"] = 1e3 * statistics.median(hops)
    notes = model_notes(data, params, shape, source, row_bytes, len(hops))
    notes += one_process_note(
        rows, "micro-batches and stages add the same terms in another order; wte's two halves are added last"
    )
    if torch_records is not None:
        torch_table, loss_gaps = torch_rows(torch_records, rows, shape)
        tables.append(
            Table(
                "ours against torch.distributed.pipelining over Gloo, same weights and batches",
                torch_table,
                TORCH_COLUMNS,
            )
        )
        data["torch"] = torch_table
        notes.append(f"torch.distributed.pipelining: largest relative loss gap {max(loss_gaps):.2e}")
    notes.append(f"plots: {', '.join(files)}")
    notes.append(load_note())
    failures = [line for f in figures for line in failures_of(f, params.dtype)]
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=files)


def plots(
    run_dir: Path, figures: list[dict], rows: list[dict], traced: dict, params, cores: int
) -> list[str]:
    """Each run's last timed step drawn (stage 0's replica), and the bubbles against m: the files."""
    p, last_step = params.pipeline, max(timed_steps(params.steps))
    files = []
    for k, f in enumerate(figures):
        if (k, last_step, 0) in traced:
            name = f"schedule-{f['schedule']}-m{f['m']}.png"
            title = f"{f['schedule']}, p={p}, m={f['m']}, step {last_step}"
            plot_schedule(run_dir / name, traced[(k, last_step, 0)], f["model_spans"], p, f["m"], title)
            files.append(name)
    if rows:
        plot_bubbles(run_dir / "bubble.png", rows, p, f"bubble of {p} stages on {cores} cores")
        files.insert(0, "bubble.png")
    return files


def run_data(
    results: list[dict], rows: list[dict], shape: GridShape, num_params: int, source, cores: int
) -> dict:
    """What result.json keeps beside the tables: the runs, plans, grid, model and calibration."""
    return {
        "runs": rows,
        "plan": [r["plan"] for r in results if r["data_index"] == 0],
        "grid": {"data": shape.data, "pipeline": shape.pipeline},
        "parameters": num_params,
        "model": source.to_dict(),
        "cores": cores,
        "stage_compute_ms": {  # forward + backward of one micro-batch, per stage, as calibrated
            m: [1e3 * (c["forward_s"] + c["backward_s"]) for c in calibration]
            for m, calibration in results[0]["calibration"].items()
        },
    }


def model_notes(data: dict, params, shape: GridShape, source, row_bytes: int, num_hops: int) -> list[str]:
    """The plan, what the model assumes, the bubble's two readings, the stages' compute, and how long
    a message took to reach a stage waiting for it (`hop_ms`, measured over `num_hops`)."""
    cores = data["cores"]
    largest = max(params.micro_batches)
    compute = data["stage_compute_ms"][str(largest)]
    notes = [
        "plan: " + "; ".join(data["plan"]),
        f"model: each stage's forward and backward of one micro-batch timed alone; a replica's stages on "
        f"{cores / shape.data:g} of the {cores} cores, shared when more compute at once; messages on the "
        f"link of the {source.caption}",
        "bubble: from the trace, the share of stages x step time in which no forward or backward ran "
        "(waiting for an activation or a gradient, or handing one over); the formula assumes equal stages, "
        "free messages and a core per stage (the schedules simulated under it give exactly the formula)",
        f"compute of one micro-batch at m = {largest}, forward + backward per stage (calibrated): "
        f"{_slash(compute, lambda x: f'{x:.2f}')} ms; the first stage also embeds, the last also computes "
        "the output layer and the loss: the stages are not equal",
    ]
    if "hop_ms" in data:
        largest_message = (params.batch // shape.data) // min(params.micro_batches) * row_bytes
        notes.append(
            f"messages: an activation or gradient reached a stage already waiting for it "
            f"{data['hop_ms']:.2f} ms (median of {num_hops}) after its send began, wake-up included; the "
            f"model's alpha + bytes / beta: {1e3 * source.link.message_time_s(row_bytes):.3f} ms for one "
            f"sequence's, {1e3 * source.link.message_time_s(largest_message):.3f} ms for the largest"
        )
    return notes
