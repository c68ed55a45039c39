"""The training lab's report: per mode the step's phases, memory, the model state and traffic
against ZeRO's formulas (`sharding_report`) and the step-time model; the loss curve; PyTorch DDP or
FSDP2 beside ours when it ran.

`params` is the node's Params (sizes, its `Mode`s, steps, the model's link); `ddp` and `fsdp` the
baselines' per-rank step records, or None. The ranks' records name each mode (`Mode.name`), in the
order of `params.mode`.
"""

from pathlib import Path

from playground.core.machine import load_note, usable_cores
from playground.core.sizes import format_size
from playground.display.report import Report, Table
from playground.models.calibration import load_model, run_network
from playground.training import training_stats
from playground.training.baseline_report import ddp_part, fsdp_part
from playground.training.comm_cost import behind_compute_ratio, collective_cost
from playground.training.plots import largest_difference, plot_losses
from playground.training.sharding_report import zero_table
from playground.training.step_model_report import MODEL_COLUMNS, MODEL_LEGEND, model_row
from playground.training.steptime_model import departure
from playground.training.units import UnitPlan
from playground.transformer import ParamLayout
from playground.transformer.text import LIKE_NGRAMS_FOUND, LIKE_VALID_UTF8, Likeness

STEP_COLUMNS = {
    "mode": "mode",
    "step_ms": "step (ms)",
    "forward_ms": "forward",
    "backward_ms": "backward",
    "exposed_ms": "exposed comm",
    "skew_ms": "rank skew",
    "optimizer_ms": "optimizer",
    "check_ms": "checks",
    "allreduce_ms": "all-reduce",
    "overlap_pct": "overlap (%)",
    "tokens_per_s": "tokens/s",
    "loss_first": "loss step 0",
    "loss_last": "loss last",
}
MEMORY_COLUMNS = {
    "mode": "mode",
    "params": "parameters",
    "grads": "gradients",
    "optimizer": "optimizer states",
    "states_ratio": "states / replicated",
    "rss": "RSS (rank 0)",
    "peak_rss": "peak RSS (max rank)",
}
MEMORY_LEGEND = {
    "states_ratio": "this mode's optimizer states / a replicated mode's (ZeRO-1, -2 and -3 shard them: 1 / ranks)",
}
LOSS_ROWS = 10  # rows of the loss table (steps evenly spaced, the last always in)


def _ms(x: float) -> float:
    return x * 1e3


def step_row(stats: dict, overlap: dict | None) -> dict:
    return {
        "mode": stats["mode"],
        "step_ms": _ms(stats["step_s"]),
        "forward_ms": _ms(stats["forward_s"]),
        "backward_ms": _ms(stats["backward_s"]),
        "exposed_ms": _ms(stats["comm_s"]),
        "skew_ms": _ms(stats["skew_s"]) if stats["skew_s"] is not None else float("nan"),
        "optimizer_ms": _ms(stats["optimizer_s"]),
        "check_ms": _ms(stats["check_s"]),
        "allreduce_ms": _ms(stats["allreduce_s"]),
        "overlap_pct": overlap["overlap_pct"] if overlap else 0.0,
        "tokens_per_s": stats["tokens_per_s"],
        "loss_first": stats["losses"][0],
        "loss_last": stats["losses"][-1],
    }


def memory_row(stats: dict, replicated_states: int | None) -> dict:
    mem = stats["memory"]
    states = mem[0]["optimizer_bytes"]
    return {
        "mode": stats["mode"],
        "params": format_size(mem[0]["params_bytes"]),
        "grads": format_size(mem[0]["grads_bytes"]),
        "optimizer": format_size(states),
        "states_ratio": states / replicated_states if replicated_states else float("nan"),
        "rss": format_size(mem[0]["rss_bytes"]),
        "peak_rss": format_size(max(m["peak_rss_bytes"] for m in mem)),
    }


def loss_rows(curves: dict[str, list[float]]) -> tuple[list[dict], dict[str, str]]:
    steps = len(next(iter(curves.values())))
    picks = sorted({round(i * (steps - 1) / max(1, LOSS_ROWS - 1)) for i in range(LOSS_ROWS)})
    rows = [{"step": s, **{label: c[s] for label, c in curves.items() if s < len(c)}} for s in picks]
    return rows, {"step": "step", **{label: label for label in curves}}


def sample_notes(rank0: dict, params) -> list[str]:
    """What rank 0 wrote after training, how, and how much of it is the lecture's."""
    if params.sample_bytes == 0 or "sample" not in rank0:
        return []
    how = (
        "greedily (the most likely byte each time)"
        if params.temperature == 0
        else f"at temperature {params.temperature:g} (seed {params.seed})"
    )
    notes = [
        f"sample: {params.sample_bytes} bytes written by rank 0 after training, {how}, after the prompt "
        f"{params.prompt!r}, shown as UTF-8 text (up to the last whole character; a byte that forms "
        f"no character as \ufffd): {rank0['sample']!r}"
    ]
    likeness = rank0.get("sample_likeness")
    if likeness:
        like = Likeness(**likeness)
        verdict = "lecture-like" if like.is_lecture_like else "not yet lecture-like"
        notes.append(
            f"the sample: {like.describe()}: {verdict} (at least {LIKE_VALID_UTF8:.0%} and {LIKE_NGRAMS_FOUND:.0%}; "
            "playground/transformer/text.py)"
        )
    return notes


def report(
    results: list[dict],
    params,
    run_dir: Path,
    ddp_records: list[list[dict]] | None = None,
    fsdp: list[list[dict]] | None = None,
) -> Report:
    """Per mode the step, the loss, memory, the formulas and the model (`mode_tables`); the DDP or
    FSDP2 baseline's table (`ddp_part`, `sharding_report.fsdp_part`); the loss plot and the notes
    that explain the columns. (Longer than most: the report's parts in the order it reads.)"""
    n, run_dir = len(results), Path(run_dir)
    tokens = params.batch * params.context
    stats = [training_stats.mode_stats(results, k, tokens) for k in range(len(params.mode))]
    for k, s in enumerate(stats):
        s["slowest"] = training_stats.slowest_steps([res["modes"][k]["steps"] for res in results])
    step_overlaps = training_stats.traced_step_overlaps(run_dir, n, params.steps)
    overlap = {mode: training_stats.overlap_over(per_step) for mode, per_step in step_overlaps.items()}
    pieces = training_stats.piece_times(run_dir, n, params.steps, params.micro_batches)
    resumes = training_stats.gather_delays(run_dir, n, params.steps)
    tables, model_rows, notes = mode_tables(
        stats, params, n, overlap, load_model(params.model, run_network(run_dir)), pieces, resumes
    )
    data: dict[str, object] = {
        "modes": [{k: v for k, v in s.items() if k != "slowest"} for s in stats],
        "overlap": overlap,
        "step_model": model_rows,
    }
    curves = {s["mode"]: s["losses"] for s in stats}
    if ddp_records is not None:
        table, ddp, note = ddp_part(stats, params, step_overlaps, ddp_records, tokens)
        tables.append(table)
        curves[ddp["mode"]] = ddp["losses"]
        data["ddp"] = ddp
        notes.append(note)
    if fsdp is not None:
        table, theirs, note = fsdp_part(params.mode, stats, fsdp, tokens)
        tables.append(table)
        curves[theirs["mode"]] = theirs["losses"]
        data["fsdp"] = theirs
        notes.append(note)
    loss_table, loss_columns = loss_rows(curves)
    same = " (every curve starts from the same weights)" if len(curves) > 1 else ""
    tables.insert(1, Table(f"loss of the global batch{same}", loss_table, loss_columns))
    files = []
    if stats:
        plot_losses(curves, run_dir / "loss.png", f"training on the lecture's text, {n} ranks")
        files.append("loss.png")
        agree = (
            f"; the {len(curves)} curves agree to rounding (largest difference "
            f"{largest_difference(curves):.1e}), the lower panel shows how"
            if len(curves) > 1
            else ""
        )
        notes.append(f"loss plot: {run_dir / 'loss.png'} (the loss of every step{agree})")
    notes += column_notes(stats, params)
    notes += sample_notes(results[0], params)
    if "sample" in results[0]:
        data["sample"] = results[0]["sample"]
        data["sample_likeness"] = results[0].get("sample_likeness")
    if (run_dir / "model.npz").exists():
        notes.append(f"weights: {run_dir / 'model.npz'}")
        files.append("model.npz")
    return Report(ok=True, tables=tables, notes=notes, data=data, files=files)


def mode_tables(
    stats: list[dict],
    params,
    n: int,
    overlap: dict,
    source,
    pieces: dict | None = None,
    resumes: dict | None = None,
) -> tuple[list[Table], list[dict], list[str]]:
    """The step, memory, formulas and model tables, a row per mode; the model's rows; where each
    mode departs from its model (with more than one rank). `pieces`: each mode's piece times from
    the trace (`training_stats.piece_times`), which the unit modes' model replays, with what a wait
    for gathers paid beyond them (`resumes`, `training_stats.gather_delays`)."""
    config, modes = params.model_config, params.mode
    itemsize = config.np_dtype.itemsize
    replicated = next(
        (s["memory"][0]["optimizer_bytes"] for mode, s in zip(modes, stats, strict=True) if not mode.sharded),
        2 * config.num_params * itemsize,  # without a replicated mode: Adam's m and v of every parameter
    )
    alone = next((s["backward_s"] for mode, s in zip(modes, stats, strict=True) if not mode.overlaps), None)
    cost, behind = collective_cost(source), behind_compute_ratio(source)
    cores = source.calibration.cores if source.calibration is not None else usable_cores()
    plan = UnitPlan(ParamLayout.for_config(config), params.unit_blocks, n)
    step_rows, memory_rows, model_rows, notes = [], [], [], []
    for mode, s in zip(modes, stats, strict=True):
        step_rows.append(step_row(s, overlap.get(mode.name)))
        memory_rows.append(memory_row(s, replicated))
        units = (
            {
                "plan": plan,
                "itemsize": itemsize,
                "params": params,
                "pieces": pieces[mode.name],
                "resume_s": (resumes or {}).get(mode.name, 0.0),
            }
            if pieces and mode.name in pieces
            else None
        )
        model_rows.append(
            model_row(mode, s, n, config.num_params * itemsize, params.algorithm, cost, cores, units, behind)
        )
        if n > 1:
            comm_s = model_rows[-1]["comm_model_ms"] / 1e3
            notes.append(
                f"{mode.name}: {departure(mode.overlaps, s, comm_s, alone if mode.overlaps else None)}"
            )
    zero, zero_notes = zero_table(modes, stats, params, n)
    tables = [
        Table(
            f"data-parallel training, {n} ranks, {config.num_params:,} parameters ({params.dtype}), global batch "
            f"{params.batch} x {params.context} bytes, {params.steps} steps{' per mode' if len(modes) > 1 else ''}: "
            "per step (median of the timed steps, slowest rank)",
            step_rows,
            STEP_COLUMNS,
        ),
        Table(
            "memory per rank: the arrays' own bytes, and the process",
            memory_rows,
            MEMORY_COLUMNS,
            legend=MEMORY_LEGEND,
        ),
        zero,
        Table(
            f"step time: measured against the model ({source.caption})",
            model_rows,
            MODEL_COLUMNS,
            legend=MODEL_LEGEND,
        ),
    ]
    return tables, model_rows, notes + zero_notes


def column_notes(stats: list[dict], params) -> list[str]:
    """Each overlapping mode's all-reduces, what was checked, what the columns mean, the load."""
    notes = []
    for mode, s in zip(params.mode, stats, strict=True):
        if mode.overlaps:  # the modes with many collectives: which ones
            sizes = s["buckets"]
            what = (
                "all-reduces"
                if mode.stage < 2
                else f"units ({params.unit_blocks} blocks each) reduce-scattered"
            )
            notes.append(
                f"{s['mode']}: {len(sizes)} {what} per step, in backward order: "
                + ", ".join(format_size(b) for b in sizes[:6])
                + (" ..." if len(sizes) > 6 else "")
            )
    checked = params.steps * len(params.mode)
    notes.append(
        f"checks: after each of the {checked} steps every rank's parameters hashed and compared (zero3: the "
        "sums of the shards exchanged, every gathered unit checked against them), every reduction's result "
        "checked against the ranks' own checksums (docs/training.md#the-checks)"
    )
    notes.append(
        "exposed comm: the time the step waited for communication after backward's last compute "
        "(zero1: its reduce-scatter and all-gather; zero2: the last reduce-scatters and the all-gather; "
        "zero3: also its waits for gathers during forward and backward); rank skew: how far apart the ranks ended backward "
        "(the first collective after it waits for the last); all-reduce: the collectives' own time "
        "wherever they ran; overlap: the share of that time during which forward or backward was computing, "
        "from the trace; checks: the per-step exchange of hashes and checksums"
    )
    notes.append(load_note())
    return notes
