"""The results page of tensor parallelism (`results --sections tensor`): `run serving-tensor` at 2 and
4 ranks (decode step time against t for the serving lab's small model and the 25M-parameter one:
measured, the alpha-beta model, the same code simulated to 64 ranks) and `run train-tensor` at 2
ranks with torch.distributed.tensor.parallel beside it and at 4 ranks, round after round.

- decode step against t, per model: measured (median and range over the rounds of each run's median),
  the model and the simulation (median over the rounds), the tensor all-reduces' part of each;
- a training step against t on the same ranks (the rest data-parallel): ours, the model, torch's;
- the gaps to one process over every run (tokens, parameters, losses).

`calibrate` runs first, over shared memory (both scenarios run over it) at 2 ranks, from 64 B
to 1 MiB (a decode step's all-reduce is 2-16 KiB, a training step's 128 KiB, a gradient bucket up to
1 MiB); every run's model takes that calibration (`params.model`).
"""

import json
import math

from playground.commands.training_results import median_spread

SERVING_RANKS = (2, 4)  # 4 ranks on this 2-core machine: t = 4 shares the cores
TRAINING_RANKS = (2, 4)


CALIBRATE = ("--transports", "shm", "--ranks", "2", "--sizes", "64,1KiB,4KiB,16KiB,64KiB,128KiB,1MiB")


def _run(ctx, scenario: str, ranks: int, *sets: str) -> dict:
    """One run in the section's runs directory, its model on the section's calibration."""
    runs = ctx.work / "runs"
    sets = (*sets, f"params.model={ctx.work / 'calibration.json'}")
    flags = [a for s in sets for a in ("--set", s)]
    ctx.run("run", scenario, "--ranks", str(ranks), *flags, "--out", str(runs), timeout_s=900)
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def _cell(values: list[float], digits: int = 2) -> str:
    values = [v for v in values if not math.isnan(v)]
    return median_spread(values, 1.0, digits) if values else "-"


def _median(values: list[float], digits: int = 2) -> str:
    values = sorted(v for v in values if not math.isnan(v))
    return f"{values[len(values) // 2]:,.{digits}f}" if values else "-"


def _serving(rounds: int, serving: dict[int, list[dict]]) -> list[str]:
    lines = [
        "## Decode step against t\n",
        "`run serving-tensor`: 8 sequences decoded together, each rank running the KV-cache engine over its "
        "shard's heads and a pool of its heads' KV; the same deterministic scheduler on every rank; every "
        "rank's tokens checked against one process. Measured: rank 0's decode steps of every round of the "
        "run, pooled, median; here the median (range) over "
        f"{rounds} run(s). Model: the one-process step's slope over layers is a block's compute, then "
        "rest + layers x (block / t + 2 all-reduces of batch x d float32) on the link of this machine's "
        "calibration over shared memory. Simulated: "
        "the same code on t simulated ranks with a core each, each shard's compute measured as it runs; "
        "beyond the model's heads the same widths cut into more heads. At 4 ranks on this 2-core machine "
        "the measured t = 4 shares the cores.\n",
    ]
    for shape in dict.fromkeys(r["shape"] for r in serving[SERVING_RANKS[0]][0]["rows"]):
        lines += [
            f"### The {shape} model\n",
            "| t | measured (ms) | of which all-reduce | model (ms) | of which all-reduce | simulated (ms) | "
            "of which all-reduce | tokens |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        ts = sorted(
            {r["t"] for runs in serving.values() for res in runs for r in res["rows"] if r["shape"] == shape}
        )
        for t in ts:
            rows = [
                r for runs in serving.values() for res in runs for r in res["rows"] if r["shape"] == shape
            ]
            mine = [r for r in rows if r["t"] == t]
            measured = [r for r in mine if not math.isnan(r["measured_ms"])]
            tokens = (
                "= 1 process"
                if measured
                else ("= 1 rank" if all(r["tokens"] == "= 1 rank" for r in mine) else "-")
            )
            lines.append(
                f"| {t} | {_cell([r['measured_ms'] for r in measured])} | "
                f"{_median([r['allreduce_ms'] for r in measured])} | {_median([r['model_ms'] for r in mine])} | "
                f"{_median([r['model_allreduce_ms'] for r in mine])} | {_median([r['sim_ms'] for r in mine])} | "
                f"{_median([r['sim_allreduce_ms'] for r in mine])} | {tokens} |"
            )
        lines.append("")
    return lines


def _training(rounds: int, training: dict[int, list[dict]]) -> list[str]:
    lines = [
        "## A training step against t\n",
        "`run train-tensor`: the transformer of the training lab's scenario (float64), on the same ranks t "
        "tensor-parallel and the rest data-parallel (bucketed), each run checked against one process after "
        f"every step; the step of the slowest rank, median of the timed steps, then the median (range) over "
        f"{rounds} run(s). torch: torch.distributed.tensor.parallel (ColwiseParallel / RowwiseParallel on "
        "DTensor) over Gloo, the same weights, batches and grid.\n",
        "| ranks | t | grid | step ours (ms) | model (ms) | tensor all-reduce (ms) | step torch (ms) | "
        "loss gap to torch |",
        "|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for ranks, runs in training.items():
        for k, row in enumerate(runs[0]["runs"]):
            each = [res["runs"][k] for res in runs]
            torch = [res["torch"][k] for res in runs if "torch" in res]
            gap = f"{max(r['loss_gap'] for r in torch):.1e}" if torch else "-"
            lines.append(
                f"| {ranks} | {row['t']} | {row['grid']} | {_cell([r['step_ms'] for r in each])} | "
                f"{_median([r['model_ms'] for r in each])} | {_cell([r['tensor_ms'] for r in each])} | "
                f"{_cell([r['step_torch_ms'] for r in torch]) if torch else '-'} | {gap} |"
            )
    return lines


def tensor(ctx) -> str:
    """The page's body; `ctx` is `results.Context` (runs a child command, says where runs go)."""
    rounds = 1 if ctx.quick else ctx.rounds
    serving: dict[int, list[dict]] = {r: [] for r in SERVING_RANKS}
    training: dict[int, list[dict]] = {r: [] for r in TRAINING_RANKS}
    calibration = ctx.work / "calibration.json"
    ctx.run("calibrate", *CALIBRATE, "--out", str(calibration), "--work", str(ctx.work / "calibrate"))
    for _ in range(rounds):  # the runs alternate round by round
        for ranks in SERVING_RANKS:
            sets = [] if ranks == SERVING_RANKS[0] else ["params.simulate=[]"]
            serving[ranks].append(_run(ctx, "serving-tensor", ranks, *sets))
        for ranks in TRAINING_RANKS:
            sets = ["params.baseline=tensor_parallel"] if ranks == TRAINING_RANKS[0] else []
            training[ranks].append(_run(ctx, "train-tensor", ranks, *sets))
    every = [r for runs in training.values() for res in runs for r in res["runs"]]
    lines = [
        *_serving(rounds, serving),
        *_training(rounds, training),
        f"\nEvery serving run's tokens equal one process's on every rank; every training run against one "
        f"process on the whole batch: parameters within {max(r['param_gap'] for r in every):.1e} of the "
        f"largest, losses within {max(r['loss_gap'] for r in every):.1e} (relative), over {len(every)} runs.\n",
    ]
    return "\n".join(lines)
