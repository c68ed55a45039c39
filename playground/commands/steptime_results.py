"""The step-time page of `python -m playground results` (docs/results/steptime.md): the training
step's model (`playground.training.steptime_model`) against the measured step, every mode of
`run train-modes` at 2 and 4 ranks, rank counts alternating round by round, from the calibration
`calibrate` wrote (the run reads it as every model column does); then sharded data parallelism's
trade, its pathologies, FSDP2 beside ZeRO-3 and the simulator's scaling (`sharding_results`)."""

import json
import statistics

from playground.commands.sharding_results import sharding_section
from playground.commands.training_results import median_spread

RANKS = (2, 4)
WITHIN = 0.25


def _rows(run) -> list[dict]:
    return json.loads((run / "result.json").read_text())["step_model"]


def steptime_section(ctx) -> str:
    """Rounds of `run train-modes` at 2 and 4 ranks: per mode the measured step, the model's, their
    ratio (median and range over the rounds) and the cores the model ran the collectives on."""
    runs = ctx.work / "runs"
    rounds = 1 if ctx.quick else ctx.rounds
    figures: dict[tuple[int, str], list[dict]] = {}
    for _ in range(rounds):
        for n in RANKS:
            ctx.run(
                "run", "train-modes", "--ranks", str(n), "--set", "params.sample_bytes=0", "--out", str(runs)
            )
            for row in _rows(ctx.latest(runs)):
                figures.setdefault((n, row["mode"]), []).append(row)
    lines = [
        "Each row: `run train-modes` (the six data-parallel modes on the same model and batches, "
        "docs/training.md), its step as measured (slowest rank, median of the timed steps) and as the "
        "model predicts it (playground/training/steptime_model.py). Measured and taken as they are: "
        "the path to the collectives, from the first rank's start of the step to the last rank's end "
        "of backward (compute, and at 4 ranks on 2 cores the ranks that waited for a core to start), "
        "and the optimizer. Modelled from this machine's calibration: the collectives, by the closed "
        "forms where every rank has a core, by the simulator on the calibrated host where they wait "
        "for cores (half the cores during backward, shared with the compute threads, and each message "
        "behind compute while backward runs: the calibration's `behind_compute` ratio; ZeRO-2 and -3 "
        "as in the trade below); serial modes "
        "wait for all of it, the overlapped ones for the tail that outlasts backward. `cores`: the "
        "cores the ranks got, their compute's CPU time over its wall time (fewer than the machine's "
        f"when others use it). Median (range) over {rounds} round(s); times in ms.\n",
        "| ranks | mode | measured | path + optimizer (measured) | exposed comm (model) | model "
        "| measured / model | cores | within 25% |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    inside = 0
    for (n, mode), rows in figures.items():
        ratios = [r["ratio"] for r in rows]
        ok = abs(statistics.median(ratios) - 1) <= WITHIN
        inside += ok
        model = [
            r["overlapped_ms"] if r["overlapped_ms"] == r["overlapped_ms"] else r["serial_ms"] for r in rows
        ]
        lines.append(
            f"| {n} | {mode} | {median_spread([r['measured_ms'] for r in rows])} | "
            f"{median_spread([r['compute_ms'] for r in rows])} | {median_spread([r['exposed_model_ms'] for r in rows])} | "
            f"{median_spread(model)} | "
            f"{median_spread(ratios, digits=2)} | {'/'.join(str(r['cores']) for r in rows)} | "
            f"{'yes' if ok else 'no'} |"
        )
    lines += [
        "",
        f"{inside} of {len(figures)} rows within 25% (the median ratio).",
        "",
        sharding_section(ctx),
    ]
    return "\n".join(lines) + "\n"
