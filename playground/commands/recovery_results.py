"""The recovery page of `python -m playground results` (docs/results/recovery.md).

1. What a checkpoint costs the step: `run train-recovery` without faults, its checkpoints written
   synchronously and asynchronously, round by round: the stall per checkpoint against the write's
   own time.
2. Goodput against the checkpoint interval: `run train-recovery` at each `checkpoint_every` with
   the mtbf drill killing a rank at random, every run restarted from its newest checkpoint as often
   as needed; the measured useful steps per second beside the model (`models/recovery.py`) fed with
   this machine's step, stall and recovery times, and Young/Daly's optimum marked; a plot.
3. The ways to recover: one rank killed mid-run, the group restarted from the checkpoint, or from a
   healthy peer, or shrunk to the ranks left; each restart's time split into its phases, and the
   final parameters against a run without the fault.

`ctx` is results' Context: `run(*args)` runs `python -m playground ARGS` as a child and records the
command for the page, `latest(runs)` is the newest run under `runs`.
"""

import json
import statistics
from pathlib import Path

from playground.models import recovery as model

SCENARIO = "train-recovery"
INTERVALS = (2, 5, 10, 20, 50, 100)
QUICK = ("params.d_model=32", "params.layers=1", "params.context=32", "params.batch=8", "params.steps=300")


def sets(pairs) -> list[str]:
    return [a for s in pairs for a in ("--set", s)]


def _run(ctx, runs: Path, *pairs: str) -> dict:
    """`run train-recovery --set ...` (and the quick sizes): its result.json."""
    ctx.run("run", SCENARIO, "--out", str(runs), *sets([*(QUICK if ctx.quick else ()), *pairs]))
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def figures(result: dict) -> dict:
    """A run's figures: steps, wall time of its steps (restarts included), step period, goodput, the
    checkpoints' stall and write (the slowest rank's medians), its restarts' total times."""
    mode = result["modes"][0]
    checkpoints = [c for c in result.get("checkpoints") or [] if c.get("stall_s")]
    restarts = (result.get("recovery") or {}).get("restarts") or []
    steps = len(mode["losses"])
    return {
        "steps": steps,
        "wall_s": mode["wall_s"],
        "period_s": mode["period_s"],
        "goodput": steps / mode["wall_s"],
        "stall_s": max((c["stall_s"]["median"] for c in checkpoints), default=None),
        "write_s": max((c["write_s"]["median"] for c in checkpoints if c.get("write_s")), default=None),
        "bytes": max((c["bytes"] for c in checkpoints), default=0),
        "restarts": [r["total_s"] for r in restarts if r.get("total_s") is not None],
    }


def stall_part(ctx, runs: Path) -> tuple[list[str], dict]:
    """Synchronous against asynchronous checkpoints, no faults: (the page's lines, the figures)."""
    off = ("recovery.mtbf_s=null", "params.checkpoint_every=20")
    rounds = 1 if ctx.quick else ctx.rounds
    seen: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(rounds):
        for asynchronous in (False, True):
            seen[asynchronous].append(
                figures(_run(ctx, runs, *off, f"params.checkpoint_async={asynchronous}"))
            )
    lines = [
        "## What a checkpoint costs the step\n",
        "Every rank writes its part (parameters, Adam's states, the data position, the record so far) "
        "every 20 steps: synchronously, the step waits for the whole write (encode, SHA-256, write, "
        "fsync, rename); asynchronously, only for a copy of the arrays, and a thread writes while the "
        f"steps go on. Median over {rounds} round(s), each the slowest rank's median checkpoint.\n",
        "| checkpoint | per rank | stall per checkpoint (ms) | the write itself (ms) | step (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for asynchronous, runs_seen in sorted(seen.items()):
        stall = statistics.median(f["stall_s"] for f in runs_seen)
        write = statistics.median(f["write_s"] for f in runs_seen)
        period = statistics.median(f["period_s"] for f in runs_seen)
        lines.append(
            f"| {'asynchronous' if asynchronous else 'synchronous'} | {runs_seen[0]['bytes'] / 2**20:.2f} MiB | "
            f"{1e3 * stall:.2f} | {1e3 * write:.2f} | {1e3 * period:.1f} |"
        )
    return lines, {"sync": seen[False], "async": seen[True]}


def goodput_part(ctx, runs: Path, stall: dict) -> tuple[list[str], dict]:
    """The sweep of `checkpoint_every` under the mtbf drill, beside the model."""
    mtbf_s = 1.0 if ctx.quick else 10.0
    intervals = (2, 10, 40) if ctx.quick else INTERVALS
    baseline = figures(_run(ctx, runs, "recovery.mtbf_s=null", "params.checkpoint_every=0"))
    step_s = baseline["period_s"]
    checkpoint_s = statistics.median(f["stall_s"] for f in stall["sync"])
    measured = {
        k: figures(_run(ctx, runs, f"recovery.mtbf_s={mtbf_s}", f"params.checkpoint_every={k}"))
        for k in intervals
    }
    recoveries = [t for f in measured.values() for t in f["restarts"]]
    recover_s = statistics.median(recoveries) if recoveries else 0.0
    best = model.young_daly_steps(step_s, checkpoint_s, mtbf_s)
    rows = []
    for k, f in measured.items():
        predicted = model.goodput(k, step_s, checkpoint_s, recover_s, mtbf_s)
        rows.append({"k": k, "failures": len(f["restarts"]), "measured": f["goodput"], "model": predicted})
    lines = [
        "## Goodput against the checkpoint interval\n",
        f"`run {SCENARIO}` with the mtbf drill (a rank SIGKILLed at exponential intervals of "
        f"{mtbf_s:g} s) at each `checkpoint_every`, synchronous checkpoints, every failure restarted "
        "from the newest whole checkpoint: useful steps per second, restarts included (the steps' "
        "first start to their last end). The model (`playground/models/recovery.py`, Daly's) takes "
        f"this machine's step ({1e3 * step_s:.1f} ms, a run without checkpoints), the checkpoint's "
        f"stall C = {1e3 * checkpoint_s:.1f} ms (above) and the median recovery R = {recover_s:.2f} s "
        f"(the restarts below); Young/Daly's optimum sqrt(2 C M) is {best:.1f} steps.\n",
        "| checkpoint every (steps) | failures | goodput (steps/s) | model (steps/s) | measured / model |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['k']} | {r['failures']} | {r['measured']:.2f} | {r['model']:.2f} | {r['measured'] / r['model']:.2f} |"
        for r in rows
    ]
    lines.append(f"\nWithout failures or checkpoints the step runs at {1 / step_s:.2f} steps/s.\n")
    plot = goodput_plot(ctx.out / "recovery-goodput.svg", rows, step_s, checkpoint_s, recover_s, mtbf_s)
    lines.append(f"![goodput against the checkpoint interval]({plot.name})\n")
    return lines, {
        "rows": rows,
        "step_s": step_s,
        "checkpoint_s": checkpoint_s,
        "recover_s": recover_s,
        "best": best,
    }


def goodput_plot(path: Path, rows: list[dict], step_s, checkpoint_s, recover_s, mtbf_s) -> Path:
    """Measured goodput per interval, the model's curve, Young/Daly's optimum as a vertical line."""
    from playground.display.plot import figure

    ks = [r["k"] for r in rows]
    grid = sorted({*range(1, 10), *range(10, 100, 5), *range(100, 2 * max(ks) + 1, 20)})
    with figure(path, (7, 4.2)) as (fig, ax):
        ax.plot(
            grid, [model.goodput(k, step_s, checkpoint_s, recover_s, mtbf_s) for k in grid], label="model"
        )
        ax.plot(ks, [r["measured"] for r in rows], "o", label="measured")
        best = model.young_daly_steps(step_s, checkpoint_s, mtbf_s)
        ax.axvline(best, linestyle="--", color="grey", label=f"Young/Daly: {best:.1f} steps")
        ax.axhline(1 / step_s, linestyle=":", color="grey", label="no failures, no checkpoints")
        ax.set_xscale("log")
        ax.set_xlabel("checkpoint every (steps)")
        ax.set_ylabel("goodput (useful steps/s)")
        ax.legend()
    return path


def section(ctx) -> str:
    runs = ctx.work / "runs"
    stall_lines, stall = stall_part(ctx, runs)
    goodput_lines, _ = goodput_part(ctx, runs, stall)
    return "\n".join([*stall_lines, "", *goodput_lines]) + "\n"
