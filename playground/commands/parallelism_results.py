"""The results page of pipeline parallelism (`results --sections parallelism`): `run train-pipeline`
at p = 2 and p = 4 stages, GPipe and 1F1B over 1-16 micro-batches, round after round, and
torch.distributed.pipelining beside ours; what each run measured, put in tables.

- the bubble against m: measured from the trace (median and range over the rounds), the model
  (calibrated compute, alpha-beta messages, shared cores) and (p - 1) / (m + p - 1);
- the activations each stage held at its peak against the formulas (exact: one round shows it);
- ours against torch's ScheduleGPipe and Schedule1F1B: step time (median and range), loss gap;
- the gaps to one process over every run.
"""

import json

from playground.commands.training_results import median_spread

STAGES = (2, 4)
TORCH_MICRO_BATCHES = {2: "[2,8,16]", 4: "[4,8,16]"}  # torch's Schedule1F1B needs m >= p


def _run(ctx, p: int, *extra: str) -> dict:
    runs = ctx.work / "train-pipeline"
    sets = [a for s in (f"params.pipeline={p}", *extra) for a in ("--set", s)]
    ctx.run("run", "train-pipeline", "--ranks", str(p), *sets, "--out", str(runs), timeout_s=900)
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def _ms(values: list[float]) -> str:
    return median_spread(values, 1.0, 1)


def parallelism(ctx) -> str:
    """The page's body; `ctx` is `results.Context` (runs a child command, says where runs go)."""
    rounds = 1 if ctx.quick else ctx.rounds
    sweeps: dict[int, list[dict]] = {p: [] for p in STAGES}
    torch: dict[int, list[dict]] = {p: [] for p in STAGES}
    for _ in range(rounds):  # ours and torch's alternate round by round
        for p in STAGES:
            sweeps[p].append(_run(ctx, p))
            torch[p].append(
                _run(ctx, p, f"params.micro_batches={TORCH_MICRO_BATCHES[p]}", "params.baseline=pipelining")
            )
    every = [r for results in (*sweeps.values(), *torch.values()) for res in results for r in res["runs"]]
    return "\n".join(
        [
            *_bubbles(sweeps, rounds),
            *_held(sweeps),
            *_against_torch(torch),
            f"\nEvery run against one process on the whole batch: parameters within "
            f"{max(r['param_gap'] for r in every):.1e} of the largest, losses within "
            f"{max(r['loss_gap'] for r in every):.1e} (relative), over {len(every)} runs.\n",
        ]
    )


def _bubbles(sweeps: dict[int, list[dict]], rounds: int) -> list[str]:
    """The bubble against the number of micro-batches: measured, modelled, the formula; the hop."""
    first = sweeps[STAGES[0]][0]
    lines = [
        f"`run train-pipeline`: the transformer of {first['parameters']:,} parameters, its blocks split "
        "evenly over p stage processes (the first also embeds, the last also computes the output layer and "
        "the loss), float64, each run checked against one process after every step. Bubble: from the trace, "
        "the share of stages x step in which no forward or backward ran; each cell the median over "
        f"{rounds} round(s) of the run's median over its timed steps, the range beside it. The model: each "
        "stage's calibrated compute, alpha-beta messages, the stages sharing this machine's cores.\n",
        "## The bubble against the number of micro-batches\n",
        "| p | schedule | m | measured (%) | model (%) | (p-1)/(m+p-1) (%) | pipeline (ms) | model (ms) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in STAGES:
        for k, row in enumerate(sweeps[p][0]["runs"]):
            each = [s["runs"][k] for s in sweeps[p]]
            lines.append(
                f"| {p} | {row['schedule']} | {row['m']} | {_ms([r['bubble_pct'] for r in each])} | "
                f"{_ms([r['model_pct'] for r in each])} | {row['formula_pct']:.1f} | "
                f"{_ms([r['pipeline_ms'] for r in each])} | {_ms([r['pipeline_model_ms'] for r in each])} |"
            )
    for p in STAGES:
        hops = [s["hop_ms"] for s in sweeps[p] if "hop_ms" in s]
        if hops:
            lines.append(
                f"\nAt p = {p} an activation or gradient reached a stage already waiting for it "
                f"{median_spread(hops, 1.0, 2)} ms after its send began (median of each run's median), wake-up "
                "included."
            )
    return lines


def _held(sweeps: dict[int, list[dict]]) -> list[str]:
    """The activations each stage held at most, against the schedule's count."""
    lines = [
        "\n## Activations held\n",
        "The most bytes of activations each stage held at once (counted as they are kept and dropped), "
        "against the schedule's count (GPipe: m; 1F1B: min(p - s, m)) times one micro-batch's bytes.\n",
        "| p | schedule | m | held per stage (micro-batches) | formula | bytes per stage | equal |",
        "|---:|---|---:|---|---|---|---|",
    ]
    for p in STAGES:
        for row in sweeps[p][0]["runs"]:
            kib = " / ".join(f"{b / 1024:,.0f} KiB" for b in row["held_bytes"])
            lines.append(
                f"| {p} | {row['schedule']} | {row['m']} | {row['held']} | {row['held_formula']} | {kib} | "
                f"{'yes' if row['held_bytes'] == row['formula_bytes'] else 'no'} |"
            )
    return lines


def _against_torch(torch: dict[int, list[dict]]) -> list[str]:
    """Our step beside torch.distributed.pipelining's, and the largest loss gap."""
    lines = [
        "\n## Against torch.distributed.pipelining\n",
        "The same stages, weights and batches with torch's ScheduleGPipe and Schedule1F1B over Gloo, "
        "`torch.set_num_threads(1)` as our ranks pin their BLAS; step time of the slowest rank, median of the "
        "timed steps, then the median (range) over the rounds.\n",
        "| p | schedule | m | step ours (ms) | step torch (ms) | largest loss gap |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for p in STAGES:
        for k, row in enumerate(torch[p][0]["torch"]):
            each = [t["torch"][k] for t in torch[p]]
            lines.append(
                f"| {p} | {row['schedule']} | {row['m']} | {_ms([r['step_ours_ms'] for r in each])} | "
                f"{_ms([r['step_torch_ms'] for r in each])} | {max(r['loss_gap'] for r in each):.1e} |"
            )
    return lines
