"""The training page of `python -m playground results` (docs/results/training.md).

1. `run train` as a user types it, round after round, beside the same run at a constant learning
   rate (no warm-up, no decay): the wall time of the whole command, the final loss, and how
   lecture-like the sample is (`playground.transformer.text`): the figure behind "learns the
   lecture's text in about a minute".
2. `run train-modes --baseline ddp` (and train-large) at 2 and 4 ranks, bucketed, alternating
   round by round: our step against PyTorch DDP's.
3. Tokens per second of train-modes' bucketed mode at 1, 2, 4 ranks and across two emulated hosts
   (as root).

`ctx` is results' Context: `run(*args)` runs `python -m playground ARGS` as a child and records the
command for the page, `latest(runs)` is the newest run under `runs`.
"""

import json
import os
import time
from pathlib import Path

TRAIN_RANKS = (2, 4)
TRAIN_SCALING = ((1, None), (2, None), (4, None), (4, "1gbit"))  # (ranks, --hosts 2 --link RATE)
DEFAULT_RUNS = (
    ("`run train` (its defaults)", ()),
    (
        "the same at a constant rate of 0.005",
        ("params.lr=0.005", "params.warmup_steps=0", "params.min_lr=null"),
    ),
)


def median_spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """'12.3 (11.0-14.2)': the median and the range of a few rounds."""
    v = sorted(x * scale for x in values)
    mid = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return f"{mid:,.{digits}f} ({v[0]:,.{digits}f}-{v[-1]:,.{digits}f})"


def _default_figures(run: Path, wall_s: float) -> dict:
    data = json.loads((run / "result.json").read_text())
    like = data["sample_likeness"]
    return {
        "wall_s": wall_s,
        "loss": data["modes"][0]["losses"][-1],
        "valid": like["valid_utf8"],
        "found": like["ngrams_found"],
        "sample": data["sample"],
        "steps": len(data["modes"][0]["losses"]),
        "ranks": data["ranks"],
    }


def default_run(ctx) -> str:
    """`run train` as typed, and at a constant rate: wall time, loss, the sample's likeness."""
    runs = ctx.work / "default"
    variants = DEFAULT_RUNS[:1] if ctx.quick else DEFAULT_RUNS
    figures: dict[str, list[dict]] = {}
    for _ in range(1 if ctx.quick else ctx.rounds):
        for label, sets in variants:
            t0 = time.monotonic()
            ctx.run("run", "train", "--out", str(runs), *(a for s in sets for a in ("--set", s)))
            figures.setdefault(label, []).append(_default_figures(ctx.latest(runs), time.monotonic() - t0))
    first = figures[DEFAULT_RUNS[0][0]]
    lines = [
        f"## `run train`: {first[0]['steps']} steps on {first[0]['ranks']} ranks\n",
        "The whole command's wall time (start-up, training, the checks of every step, the sample, the "
        "report); the loss of the last step; the sample's share of bytes in valid UTF-8 characters and "
        "of its 4-byte sequences found in the lecture (each distinct one once). Median (range) over the "
        "rounds.\n",
        "| run | wall time (s) | final loss | valid UTF-8 (%) | 4-byte sequences in the lecture (%) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, fs in figures.items():
        lines.append(
            f"| {label} | {median_spread([f['wall_s'] for f in fs])} | "
            f"{median_spread([f['loss'] for f in fs], digits=3)} | {median_spread([f['valid'] for f in fs], 100, 0)} | "
            f"{median_spread([f['found'] for f in fs], 100, 0)} |"
        )
    lines += ["", f"The default run's sample (the last round's): `{first[-1]['sample']!r}`\n"]
    return "\n".join(lines)


def _train_figures(run: Path) -> dict:
    """Ours (bucketed) and DDP's medians from one `run train-modes --baseline ddp` run."""
    data = json.loads((run / "result.json").read_text())
    ours = next(m for m in data["modes"] if m["mode"] == "bucketed")
    out = {
        "ours_step": ours["step_s"],
        "ours_exposed": ours["comm_s"],
        "ours_compute": ours["forward_s"] + ours["backward_s"],
        "ours_overlap": data["overlap"].get("bucketed", {}).get("overlap_pct", 0.0),
        "tokens_per_s": ours["tokens_per_s"],
    }
    if "ddp" in data:
        ddp = data["ddp"]
        out |= {
            "ddp_step": ddp["step_s"],
            "ddp_exposed": ddp["comm_s"],
            "ddp_compute": ddp["forward_s"] + ddp["backward_s"],
            "ddp_overlap": ddp["overlap_pct"],
            "loss_gap": max(ddp["loss_gaps"]),
        }
    return out


def training_section(ctx) -> str:
    """The default run; PyTorch DDP beside ours on train-modes' model and the large one, alternating
    round by round; then tokens/s at 1, 2, 4 ranks and across two emulated hosts on a 1 Gbit/s link."""
    runs = ctx.work / "train"
    rounds = 1 if ctx.quick else ctx.rounds
    models = [("train-modes", "50")] if ctx.quick else [("train-modes", "50"), ("train-large", "4")]
    figures: dict[tuple, list[dict]] = {}
    for _ in range(rounds):
        for scenario, steps in models:
            for n in TRAIN_RANKS:
                ctx.run(
                    "run", scenario, "--ranks", str(n), "--baseline", "ddp", "--set", "params.mode=[bucketed]",
                    "--set", f"params.steps={steps}", "--set", "params.sample_bytes=0", "--out", str(runs),
                    timeout_s=900,
                )  # fmt: skip
                figures.setdefault((scenario, n), []).append(_train_figures(ctx.latest(runs)))
    lines = [
        default_run(ctx),
        "## Against PyTorch DDP\n",
        "Ours: the `bucketed` mode (DDP's buckets, all-reduced in place on a communication thread as "
        "backward hands the gradients over); DDP: `torch.nn.parallel.DistributedDataParallel` over "
        "Gloo with the same bucket caps, weights and batches, `torch.set_num_threads(1)` as our ranks "
        "pin their BLAS. Per step, slowest rank, median of the timed steps; each cell the median over "
        f"{rounds} round(s), the range beside it. Times in ms.\n",
        "| scenario | ranks | step ours | step DDP | exposed comm ours | exposed comm DDP | fwd+bwd ours "
        "| fwd+bwd DDP | overlap ours (%) | overlap DDP (%) | largest loss gap |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (scenario, n), fs in figures.items():

        def col(key: str, scale: float = 1e3, fs=fs) -> str:
            return median_spread([f[key] for f in fs], scale)

        lines.append(
            f"| {scenario} | {n} | {col('ours_step')} | {col('ddp_step')} | {col('ours_exposed')} | "
            f"{col('ddp_exposed')} | {col('ours_compute')} | {col('ddp_compute')} | {col('ours_overlap', 1)} | "
            f"{col('ddp_overlap', 1)} | {max(f['loss_gap'] for f in fs):.1e} |"
        )
    scaling: dict[str, list[float]] = {}
    for _ in range(rounds):
        for n, link in TRAIN_SCALING:
            if link and (ctx.quick or os.geteuid() != 0):
                continue
            hosts = ["--hosts", "2", "--link", link] if link else []
            ctx.run(
                "run", "train-modes", "--ranks", str(n), *hosts, "--set", "params.mode=[bucketed]",
                "--set", "params.sample_bytes=0", "--out", str(runs),
            )  # fmt: skip
            label = f"{n} rank{'s' if n > 1 else ''}" + (f", 2 hosts on {link}" if link else "")
            scaling.setdefault(label, []).append(_train_figures(ctx.latest(runs))["tokens_per_s"])
    lines += [
        "\n## Scaling\n",
        "`run train-modes`, bucketed, the global batch fixed (32 x 64 bytes): tokens per second of the "
        "whole run, median (range) over the rounds.\n",
        "| ranks | tokens/s |",
        "|---|---:|",
        *(f"| {label} | {median_spread(v, digits=0)} |" for label, v in scaling.items()),
    ]
    return "\n".join(lines) + "\n"
