"""The tensor-parallel serving run's report: per model shape and t, the decode step measured (rank 0's
steps of every round, pooled: median and min-max), the alpha-beta model's, the simulation's; every
rank's tokens against the one-process run's; step time against t drawn, one panel a shape.

The run fails if any rank's tokens differ from one process's, or a simulated run's from its model's
one rank's.
"""

import math
import statistics
from pathlib import Path

from playground.core.machine import load_note, usable_cores
from playground.display.plot import figure
from playground.display.report import Report, Table
from playground.models.calibration import load_model, run_network
from playground.serving.tensor.decode import decode_times
from playground.serving.tensor.simulate import simulate_sizes, split_heads
from playground.serving.tensor.steptime_model import layer_costs, predict_decode_s

COLUMNS = {
    "t": "t",
    "measured_ms": "measured (ms)",
    "range": "min-max",
    "allreduce_ms": "of which all-reduce",
    "model_ms": "model",
    "model_allreduce_ms": "of which all-reduce",
    "sim_ms": "simulated",
    "sim_allreduce_ms": "of which all-reduce",
    "speedup": "speed-up vs t=1",
    "tokens": "tokens",
}


def measured(results: list[dict], k: int) -> dict[int, dict]:
    """Shape k's runs of rank 0 per t: pooled decode step times and all-reduce times per step."""
    out: dict[int, dict] = {}
    for run in results[0]["shapes"][k]["runs"]:
        entry = out.setdefault(run["t"], {"decode_s": [], "allreduce_s": []})
        entry["decode_s"] += decode_times(run["steps"])
        entry["allreduce_s"] += [s["allreduce_s"] for s in run["steps"] if s["prefill"] == 0]
    return out


def token_failures(results: list[dict], k: int, shape: str) -> list[str]:
    """Every rank's tokens of every run against rank 0's one-process run (t = 1, the first round)."""
    runs = [(rank, run) for rank, res in enumerate(results) for run in res["shapes"][k]["runs"]]
    reference = next(run["tokens"] for rank, run in runs if rank == 0 and run["t"] == 1)
    out = []
    for rank, run in runs:
        for b, (got, want) in enumerate(zip(run["tokens"], reference, strict=True)):
            if got != want:
                i = next(
                    (i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y),
                    min(len(got), len(want)),
                )
                out.append(
                    f"{shape} model, t={run['t']} round {run['round']}, rank {rank}: request {b} differs from one "
                    f"process at token {i} ({got[i : i + 4]} against {want[i : i + 4]})"
                )
                break
    return out


def shape_rows(results: list[dict], k: int, params, link, simulated: list[dict]) -> list[dict]:
    shape = results[0]["shapes"][k]["shape"]
    config = params.config(shape)
    runs = measured(results, k)
    one_layer = statistics.median(
        t for steps in results[0]["shapes"][k]["calibration"] for t in decode_times(steps)
    )
    base = statistics.median(runs[1]["decode_s"])
    layer_s, rest_s = layer_costs(one_layer, base, config.layers)
    sims = {s["t"]: s for s in simulated}
    sim_base = sims[1]["decode_s"] if 1 in sims else math.nan
    rows = []
    for t in sorted(set(runs) | set(sims)):
        m, s = runs.get(t), sims.get(t)
        model = predict_decode_s(config, layer_s, rest_s, params.batch, t, link, params.algorithm)
        row = {
            "shape": shape,
            "t": t,
            "measured_ms": math.nan,
            "range": "",
            "allreduce_ms": math.nan,
            "model_ms": 1e3 * model["step_s"],
            "model_allreduce_ms": 1e3 * model["allreduce_s"],
            "sim_ms": math.nan if s is None else 1e3 * s["decode_s"],
            "sim_allreduce_ms": math.nan if s is None else 1e3 * s["allreduce_s"],
            "sim_heads": None if s is None else s["heads"],
            "speedup": sim_base / s["decode_s"] if s is not None and m is None else math.nan,
            "tokens": "-" if s is None else ("= 1 rank" if s["equal"] else "DIFFER"),
        }
        if m is not None:
            median = statistics.median(m["decode_s"])
            row.update(
                measured_ms=1e3 * median,
                range=f"{1e3 * min(m['decode_s']):.3g}-{1e3 * max(m['decode_s']):.3g}",
                allreduce_ms=1e3 * statistics.median(m["allreduce_s"]),
                speedup=base / median,
                tokens="= 1 process",
            )
        rows.append(row)
    return rows


def plot_decode(path: Path, rows_by_shape: dict[str, list[dict]], params) -> None:
    """Decode step time against t, one panel a shape: measured, model, simulated."""
    shapes = list(rows_by_shape)
    with figure(path, (6 * len(shapes), 4.5), ncols=len(shapes), squeeze=False) as (_, axes):
        for ax, shape in zip(axes[0], shapes, strict=True):
            rows = rows_by_shape[shape]
            meas = [r for r in rows if not math.isnan(r["measured_ms"])]
            sims = [r for r in rows if not math.isnan(r["sim_ms"])]
            heads = params.config(shape).heads
            ax.plot([r["t"] for r in meas], [r["measured_ms"] for r in meas], "o-", ms=7, label="measured")
            ax.plot(
                [r["t"] for r in rows],
                [r["model_ms"] for r in rows],
                "x--",
                label="model: compute / t + alpha-beta",
            )
            own = [r for r in sims if r["t"] <= heads]
            ax.plot([r["t"] for r in own], [r["sim_ms"] for r in own], "s:", color="C2", label="simulated")
            wide = [r for r in sims if r["t"] >= heads]
            if len(wide) > 1:
                ax.plot(
                    [r["t"] for r in wide], [r["sim_ms"] for r in wide], "s:", color="C2", mfc="none",
                    label=f"simulated, widths cut into {max(r['sim_heads'] for r in wide)} heads",
                )  # fmt: skip
            config = params.config(shape)
            ax.set_title(
                f"{shape}: {config.num_params / 1e6:.2g}M parameters, {config.layers} layers, d {config.d_model}, "
                f"{heads} heads; batch {params.batch}",
                fontsize=9,
            )
            ax.set_xscale("log", base=2)
            ts = sorted({r["t"] for r in rows})
            ax.set_xticks(ts, [str(t) for t in ts])
            ax.set_xlabel("tensor-parallel ranks t")
            ax.set_ylabel("decode step (ms)")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)


def history(results: list[dict], params, differs: int) -> dict:
    """The run as a history of decode runs, (shape, round, t), the shape chaos --recover reads: each
    done once, those a restart ran again (the round in flight when a shard died), twice and never
    (both must be 0), and `differs`: the runs whose tokens differ from one process's (failures)."""
    asked = {
        (s, r, t) for s in params.shapes for r in range(params.rounds) for t in params.sizes(s, len(results))
    }
    done = [
        (shape["shape"], run["round"], run["t"]) for shape in results[0]["shapes"] for run in shape["runs"]
    ]
    per_round = len(asked) // max(len(params.shapes) * params.rounds, 1)
    return {
        "asked": len(asked),
        "once": len(set(done) & asked),
        "again": results[0].get("redone_rounds", 0) * per_round,
        "twice": len(done) - len(set(done)),
        "never": len(asked - set(done)),
        "differs": differs,
    }


def report(results: list[dict], params, run_dir: Path) -> Report:
    """A table per model shape (`shape_table`), the plot, the notes on how each column was made."""
    run_dir = Path(run_dir)
    source = load_model(params.model, run_network(run_dir))
    cores = usable_cores()
    tables, failures, rows_by_shape = [], [], {}
    for k, shape in enumerate(params.shapes):
        table, shape_failures = shape_table(results, k, shape, params, source, cores)
        tables.append(table)
        failures += shape_failures
        rows_by_shape[shape] = table.rows
    plot_decode(run_dir / "tensor-decode.png", rows_by_shape, params)
    notes = [
        "every rank runs the engine over its own heads' pool and the same deterministic scheduler; its tokens "
        f"are checked against the one-process run's (temperature {params.temperature:g}: each request "
        "samples with its own seed, so every logit matters)",
        "model: the one-process decode step with 1 and with all layers gives a block's compute (the slope) and "
        "the rest (embedding, head, scheduling); then rest + layers x (block / t + 2 all-reduces of batch x d "
        f"float32) on the link of the {source.caption}",
        "simulated: the same code on t simulated ranks (SimWorld), a core each: messages on that link, each "
        "shard's compute measured as it runs (its CPU time between two all-reduces, SMPI's way), so small "
        "shards' per-call costs are in it",
        f"measured up to {len(results)} ranks on {cores} cores"
        + (
            f": t > {cores} share the cores (each all-reduce waits for a rank that is not running)"
            if len(results) > cores
            else ""
        ),
        "plot: tensor-decode.png",
        load_note(),
    ]
    data = {
        "rows": [r for rows in rows_by_shape.values() for r in rows],
        "model": source.to_dict(),
        "cores": cores,
        "history": history(results, params, len(failures)),
    }
    return Report(
        ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=["tensor-decode.png"]
    )


def shape_table(
    results: list[dict], k: int, shape: str, params, source, cores: int
) -> tuple[Table, list[str]]:
    """Shape `k`'s table (measured, model, simulated per t) and its failures: a rank's tokens, or a
    simulated run's, that differ from one rank's."""
    config = params.config(shape)
    failures = token_failures(results, k, shape)
    simulated = (
        simulate_sizes(config, params.workload, params.simulate, source.link, params.seed)
        if params.simulate
        else []
    )
    failures += [
        f"{shape} model simulated at t={s['t']}: tokens differ from its one rank's"
        for s in simulated
        if not s["equal"]
    ]
    wide = split_heads(config, params.simulate)
    title = (
        f"{shape} model ({config.num_params:,} parameters: {config.layers} layers, d {config.d_model}, "
        f"{config.heads} heads), decode steps of {params.batch} sequences on t ranks of {len(results)} "
        f"({cores} cores), {params.rounds} rounds"
        + ("" if wide is None else f"; simulated beyond {config.heads} heads: d cut into {wide.heads}")
    )
    return Table(title, shape_rows(results, k, params, source.link, simulated), COLUMNS), failures
