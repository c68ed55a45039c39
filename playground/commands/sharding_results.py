"""Sharded data parallelism's part of the step-time page (docs/results/steptime.md): the trade.

1. Every mode's step beside the calibrated model, with and without prefetch, at 2 and 4 ranks, on
   train-modes and train-large: the rows of `run train-modes` (every mode, ZeRO-3 one unit ahead) and
   of ZeRO-3 alone without prefetch, two ahead, and keeping its units after forward.
2. The two pathologies: ZeRO-3 without unit wrapping (one unit: nothing to overlap), ZeRO-2 with
   gradient accumulation (a reduce-scatter per micro-batch: the bytes sent against bucketed's).
3. ZeRO-3 against PyTorch FSDP2 (`--baseline fsdp`): step, model state, peak RSS growth, loss gap.
4. The simulator's answer to where ZeRO-3 stops paying (`training.zero_scaling`): a CPU rank per node
   over Ethernet, and GPU-like ranks (8 a node over NVLink, InfiniBand between).

`ctx` is results' Context (`run` a child command, recorded for the page; `latest(runs)`).
"""

import json
import statistics

from playground.commands.training_results import median_spread
from playground.training import zero_scaling

RANKS = (2, 4)
WITHIN = 0.15
ZERO3_VARIANTS = (  # (label, --set values), ZeRO-3 alone
    ("0", ("params.prefetch=0",)),
    ("2", ("params.prefetch=2",)),
    ("1, kept after forward", ("params.reshard_after_forward=false",)),
)
LARGE = ("params.steps=4", "params.sample_bytes=0")
SCALING = (  # (what, tokens a rank, FLOP/s or None: measured here, link between nodes, ranks a node, ranks)
    ("a CPU rank per node (this machine's rate) over 100 Gb/s Ethernet", 256, None, "ethernet", 1, "2..128"),
    ("GPU-like ranks: 400 TFLOP/s, 8 a node over NVLink, InfiniBand between", 8192, 4e14, "ib", 8, "8..256"),
)


def _result(ctx, runs) -> dict:
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def _run(ctx, runs, scenario: str, n: int, *sets: str, timeout_s: float = 1800) -> dict:
    ctx.run(
        "run", scenario, "--ranks", str(n), "--out", str(runs), *(a for s in sets for a in ("--set", s)),
        timeout_s=timeout_s,
    )  # fmt: skip
    return _result(ctx, runs)


def trade_rows(ctx) -> dict[tuple, list[dict]]:
    """(scenario, ranks, mode, prefetch) -> the model's rows of each round."""
    runs = ctx.work / "sharding"
    rounds = 1 if ctx.quick else ctx.rounds
    scenarios: list[tuple[str, tuple[str, ...]]] = [("train-modes", ("params.sample_bytes=0",))]
    if not ctx.quick:
        scenarios.append(("train-large", (*LARGE, "params.mode=[bucketed,zero1,zero2,zero3]")))
    rows: dict[tuple, list[dict]] = {}
    for _ in range(rounds):
        for scenario, sets in scenarios:
            for n in RANKS:
                for row in _run(ctx, runs, scenario, n, *sets)["step_model"]:
                    prefetch = "1" if row["mode"] == "zero3" else "-"
                    rows.setdefault((scenario, n, row["mode"], prefetch), []).append(row)
                for label, extra in ZERO3_VARIANTS[: 1 if ctx.quick else None]:
                    only = (*sets, "params.mode=[zero3]", *extra)
                    row = _mode(_run(ctx, runs, scenario, n, *only), "zero3", "step_model")
                    rows.setdefault((scenario, n, "zero3", label), []).append(row)
    return rows


def trade_table(rows: dict[tuple, list[dict]]) -> list[str]:
    lines = [
        "| scenario | ranks | mode | prefetch | measured (ms) | exposed comm (model) | model | measured / model "
        "| within 15% |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    inside = 0
    for (scenario, n, mode, prefetch), rs in rows.items():
        ratios = [r["ratio"] for r in rs]
        ok = abs(statistics.median(ratios) - 1) <= WITHIN
        inside += ok
        lines.append(
            f"| {scenario} | {n} | {mode} | {prefetch} | {median_spread([r['measured_ms'] for r in rs])} | "
            f"{median_spread([r['exposed_model_ms'] for r in rs])} | {median_spread([r['model_ms'] for r in rs])} | "
            f"{median_spread(ratios, digits=2)} | {'yes' if ok else 'no'} |"
        )
    return [*lines, "", f"{inside} of {len(rows)} rows within 15% (the median ratio)."]


def _mode(data: dict, name: str, key: str = "modes") -> dict:
    """Mode `name`'s entry of a result's `modes` (or `step_model`, ...)."""
    return next(m for m in data[key] if m["mode"] == name)


def _zero_rows(data: dict) -> list[dict]:
    return next(t for t in data["tables"] if t["title"].startswith("model state and traffic"))["rows"]


def pathologies(ctx) -> list[str]:
    """No unit wrapping against a block a unit (ZeRO-3, train-large or train-modes); ZeRO-2 with 4
    micro-batches against bucketed's (the bytes sent and the step)."""
    runs = ctx.work / "pathologies"
    scenario, sets = ("train-modes", ("params.sample_bytes=0",)) if ctx.quick else ("train-large", LARGE)
    lines = [
        "### No unit wrapping: nothing to overlap\n",
        f"`run {scenario}` at 2 ranks, ZeRO-3 with a unit per block against one unit of everything "
        "(`unit_blocks: 0`, FSDP applied to the root alone): one unit must be gathered whole before the "
        "first piece can compute and reduce-scattered only after the last, so no collective has compute "
        "to hide behind, and the whole model is whole at once.\n",
        "| units | step (ms) | exposed comm (ms) | overlap (%) | whole params (peak) | model (ms) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for label, blocks in (("a block each", 1), ("one (no wrapping)", 0)):
        data = _run(ctx, runs, scenario, 2, *sets, "params.mode=[zero3]", f"params.unit_blocks={blocks}")
        mode, model = _mode(data, "zero3"), _mode(data, "zero3", "step_model")
        zero = next(r for r in _zero_rows(data) if r["mode"] == "zero3")
        overlap = data["overlap"].get("zero3", {}).get("overlap_pct", 0.0)
        lines.append(
            f"| {label} | {mode['step_s'] * 1e3:.1f} | {mode['comm_s'] * 1e3:.1f} | {overlap:.0f} | "
            f"{zero['whole_params']} | {model['model_ms']:.1f} |"
        )
    lines += [
        "",
        "### ZeRO-2 with gradient accumulation: a reduce-scatter per micro-batch\n",
        "`run train-modes`, 4 micro-batches a step: bucketed adds them up in its whole gradient buffer and "
        "all-reduces once (DDP under `no_sync`); ZeRO-2 keeps no whole gradient to add them up in, so each "
        "micro-batch's gradients are reduce-scattered into the shard: 4 reduce-scatters and an all-gather, "
        "(m + 1) (N - 1)/N \u03a8 b against 2 (N - 1)/N \u03a8 b.\n",
        "| ranks | mode | sent a step (measured) | formula | step (ms) |",
        "|---:|---|---:|---|---:|",
    ]
    for n in RANKS:
        data = _run(ctx, runs, "train-modes", n, "params.sample_bytes=0", "params.mode=[bucketed,zero2]",
                    "params.micro_batches=4")  # fmt: skip
        for row in _zero_rows(data):
            lines.append(
                f"| {n} | {row['mode']} | {row['sent']} | {row['sent_formula']} | "
                f"{_mode(data, row['mode'])['step_s'] * 1e3:.1f} |"
            )
    return lines


def against_fsdp(ctx) -> list[str]:
    runs = ctx.work / "fsdp"
    rounds = 1 if ctx.quick else ctx.rounds
    scenarios: list[tuple[str, tuple[str, ...]]] = [("train-modes", ("params.sample_bytes=0",))]
    if not ctx.quick:
        scenarios.append(("train-large", LARGE))
    figures: dict[tuple, list[dict]] = {}
    for _ in range(rounds):
        for scenario, sets in scenarios:
            for n in RANKS:
                data = _run(ctx, runs, scenario, n, *sets, "params.mode=[zero3]", "params.baseline=fsdp")
                ours, theirs = _mode(data, "zero3"), data["fsdp"]
                mem = next(t for t in data["tables"] if t["title"].startswith("ours against PyTorch FSDP2"))[
                    "rows"
                ]
                figures.setdefault((scenario, n), []).append(
                    {"ours": ours["step_s"], "theirs": theirs["step_s"], "gap": max(theirs["loss_gaps"]),
                     "state_ours": mem[0]["state"], "state_theirs": mem[1]["state"],
                     "growth_ours": mem[0]["peak_growth"], "growth_theirs": mem[1]["peak_growth"]}
                )  # fmt: skip
    lines = [
        "| scenario | ranks | step ours (ms) | step FSDP2 (ms) | model state ours | FSDP2 | peak RSS growth ours "
        "| FSDP2 | largest loss gap |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (scenario, n), fs in figures.items():
        last = fs[-1]
        lines.append(
            f"| {scenario} | {n} | {median_spread([f['ours'] for f in fs], 1e3)} | "
            f"{median_spread([f['theirs'] for f in fs], 1e3)} | {last['state_ours']} | {last['state_theirs']} | "
            f"{last['growth_ours']} | {last['growth_theirs']} | {max(f['gap'] for f in fs):.1e} |"
        )
    return lines


def scaling(ctx) -> list[str]:
    """The simulator's study, in this process (it runs nothing but the simulator); its command line
    recorded as the others are."""
    lines = []
    for what, tokens, flops, link, per_node, ranks in SCALING[: 1 if ctx.quick else None]:
        args = ["--ranks", "2..8" if ctx.quick else ranks, "--tokens", str(tokens), "--link", link,
                "--ranks-per-node", str(per_node), *(["--flops", f"{flops:g}"] if flops else [])]  # fmt: skip
        ctx.commands.append("python -m playground.training.zero_scaling " + " ".join(args))
        rate = flops or zero_scaling.measured_flops_per_s()
        network = zero_scaling.Network(per_node, zero_scaling.PRESETS["nvlink"], zero_scaling.PRESETS[link])
        rows = zero_scaling.study(zero_scaling.parse_ranks(args[1]), tokens, rate, network)
        lines += [
            f"**{what}**: {tokens} tokens a rank a step, {rate / 1e9:,.1f} GFLOP/s a rank; ZeRO-3's step over "
            f"ZeRO-2's (* more than {zero_scaling.THRESHOLD:.0%} longer: it stops paying)\n",
            zero_scaling.table_markdown(rows),
        ]
    return lines


def sharding_section(ctx) -> str:
    """The page's part on ZeRO-2 and ZeRO-3 (module doc)."""
    lines = [
        "## Sharded data parallel: the trade\n",
        "Each row: a run's step as measured (slowest rank, median of the timed steps) and as the model "
        "predicts it from the calibration; ZeRO-2 and ZeRO-3 are modelled by replaying their schedule on "
        "the compute and communication threads (playground/training/unit_steptime.py) with each piece's "
        "compute from the trace and each unit's all-gather and reduce-scatter from the calibration "
        "(behind compute during the passes for the share of the step the ranks compute); a piece that "
        "waits for its gathers also pays what such a wait paid in the run beyond them (the last rank's late "
        "start, the hand-back to the compute thread; `training_stats.gather_delays`, from the trace). "
        "`prefetch` is ZeRO-3's (units gathered ahead of the one computing; `-`: the mode has none). "
        "Median (range) over the rounds; times in ms.\n",
        *trade_table(trade_rows(ctx)),
        "",
        "## The two pathologies\n",
        *pathologies(ctx),
        "",
        "## ZeRO-3 against PyTorch FSDP2\n",
        "`--baseline fsdp`: torch's `fully_shard` on every block and the root, over Gloo, on the same "
        "weights, batches, prefetch and resharding (playground/training/fsdp_worker.py). Model state: the "
        "parameters, gradients and Adam's states a rank holds (FSDP2: its DTensors' local shards); peak RSS "
        "growth: the process's peak above its RSS before the model was built (torch's own allocations "
        "included). Loss gap: relative, the worst step (float32).\n",
        *against_fsdp(ctx),
        "",
        "## Where ZeRO-3 stops paying (the simulator)\n",
        "Each unit's all-gather and reduce-scatter simulated on N ranks (data-free, the ring the ranks run), "
        "each piece's compute from its FLOPs; both steps replayed as the strategies run them "
        "(playground/training/zero_scaling.py). A fixed batch a rank: the gathers' bandwidth term keeps its "
        "ratio to compute, their latency grows with the ranks, so small models stop hiding first.\n",
        *scaling(ctx),
    ]
    return "\n".join(lines) + "\n"
