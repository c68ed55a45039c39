"""The results page of the mixture-of-experts lab (`results --sections moe`): `run train-moe` with its
routing workloads (balanced, a hot expert, a hot rank, a moving hotspot) and both permutations, on 2
ranks (one expert group of 2) dropless and on 4 ranks (2 replicas x an expert group of 2) with a
capacity factor of 1.25, round after round.

- the loads per workload (assignments per expert, rows per rank, max / mean, drops): the routing is
  deterministic, the same in every round, and equal to one process's;
- the step and its split per workload and permutation (median and range over the rounds of each run's
  median), beside the model: the slowest rank's rows at the balanced run's cost a row, and every
  all-to-all at its busiest rank's bytes on the calibrated link;
- the permutation both ways (permute + un-permute, sorted by expert against gathered in place);
- the gaps to one process over every run.

`calibrate` runs first, over shared memory (the scenario's transport) at 2 ranks from 64 B to 1 MiB
(an all-to-all of counts is a few bytes, one of a block's rows up to 256 KiB); every run's model
takes that calibration (`params.model`).
"""

import json
import math
import statistics

from playground.commands.training_results import median_spread

RUNS = (  # (ranks, the --set values of the run, what the page calls it)
    (2, (), "2 ranks, one expert group of 2, dropless"),
    (4, ("params.expert_parallel=2", "params.capacity_factor=1.25"), "4 ranks, 2 x 2, capacity factor 1.25"),
)
CALIBRATE = ("--transports", "shm", "--ranks", "2", "--sizes", "64,1KiB,4KiB,16KiB,64KiB,256KiB,1MiB")


def _run(ctx, ranks: int, sets: tuple[str, ...]) -> dict:
    runs = ctx.work / "runs"
    sets = (*sets, f"params.model={ctx.work / 'calibration.json'}")
    flags = [a for s in sets for a in ("--set", s)]
    ctx.run("run", "train-moe", "--ranks", str(ranks), *flags, "--out", str(runs), timeout_s=900)
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def _cell(values: list[float], digits: int = 2) -> str:
    values = [v for v in values if not math.isnan(v)]
    return median_spread(values, 1.0, digits) if values else "-"


def _median(values: list[float], digits: int = 2) -> str:
    values = [v for v in values if not math.isnan(v)]
    return f"{statistics.median(values):,.{digits}f}" if values else "-"


def _loads(title: str, result: dict) -> list[str]:
    lines = [
        f"**{title}: loads per step** (all blocks; assignments per expert kept, rows each rank's experts computed)\n",
        "| workload | assignments per expert | rows per rank | max/mean expert | max/mean rank | dropped % | as 1 process |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in result["loads"]:
        lines.append(
            f"| {r['workload']} | {r['per_expert']} | {r['per_rank']} | {r['expert_imbalance']:.2f} | "
            f"{r['rank_imbalance']:.2f} | {r['drop_pct']:.1f} | {r['same_routing']} |"
        )
    return [*lines, ""]


def _steps(title: str, rounds: list[dict]) -> list[str]:
    lines = [
        f"**{title}: the step, its split and the model (ms)**\n",
        "| workload | permute | step | router | permute | all-to-all | experts | un-permute | rest | model | "
        "experts, slowest rank | model | all-to-all, no wait | model |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, row in enumerate(rounds[0]["runs"]):
        each = [res["runs"][k] for res in rounds]
        cells = [_cell([r["step_ms"] for r in each])]
        cells += [
            _median([r[f"{p}_ms"] for r in each])
            for p in ("router", "permute", "alltoall", "experts", "unpermute", "rest")
        ]
        cells += [_median([r[key] for r in each]) for key in ("model_ms", "slowest_experts_ms", "model_experts_ms",
                                                             "exchange_ms", "model_alltoall_ms")]  # fmt: skip
        lines.append(f"| {row['workload']} | {row['permute']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _permutation(rounds_by_run: dict[str, list[dict]]) -> list[str]:
    lines = [
        "## The permutation both ways\n",
        "Permute + un-permute per step (ms, forward and backward): tokens sorted by expert once, every "
        "later read a contiguous slice (`sorted`), against each rank's and each expert's rows found by a "
        "scan and gathered where they lie, the results scatter-added back (`gathered`).\n",
        "| run | workload | sorted | gathered | gathered / sorted |",
        "|---|---|---:|---:|---:|",
    ]
    for title, rounds in rounds_by_run.items():
        for k, row in enumerate(rounds[0]["permute"]):
            each = [res["permute"][k] for res in rounds]
            lines.append(
                f"| {title} | {row['workload']} | {_cell([r['sorted_ms'] for r in each])} | "
                f"{_cell([r['gathered_ms'] for r in each])} | {_median([r['ratio'] for r in each])} |"
            )
    return [*lines, ""]


def moe(ctx) -> str:
    """The page's body; `ctx` is `results.Context` (runs a child command, says where runs go)."""
    rounds = 1 if ctx.quick else ctx.rounds
    results: dict[str, list[dict]] = {title: [] for _, _, title in RUNS}
    ctx.run(
        "calibrate",
        *CALIBRATE,
        "--out",
        str(ctx.work / "calibration.json"),
        "--work",
        str(ctx.work / "calibrate"),
    )
    for _ in range(rounds):  # the runs alternate round by round
        for ranks, sets, title in RUNS:
            results[title].append(_run(ctx, ranks, sets))
    lines = [
        "`run train-moe`: the training lab's transformer (float64) with 8 experts a block, top-2, trained "
        "with expert parallelism; per routing workload and permutation 3 steps, the step of the slowest "
        f"rank, median of the timed steps, then the median (range) over {rounds} run(s). Every run is "
        "checked against one process on the whole batch after every step, its routing and drops too.\n",
    ]
    for title, rounds_of in results.items():
        lines += [f"## {title}\n", *_loads(title, rounds_of[0]), *_steps(title, rounds_of)]
    lines += _permutation(results)
    every = [r for rounds_of in results.values() for res in rounds_of for r in res["runs"]]
    lines.append(
        f"Against one process over {len(every)} runs: parameters within "
        f"{max(r['param_gap'] for r in every):.1e} of the largest, losses within "
        f"{max(r['loss_gap'] for r in every):.1e} (relative); every run routed and dropped exactly one "
        "process's assignments.\n"
    )
    return "\n".join(lines)
