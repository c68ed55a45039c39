"""The recovery page of `python -m playground results` (docs/results/recovery.md).

1. What a checkpoint costs the step: `run train-recovery` without faults, its checkpoints written
   synchronously and asynchronously, round by round: the stall per checkpoint against the write's
   own time.
2. Goodput against the checkpoint interval: `run train-recovery` at each `checkpoint_every` with
   the mtbf drill killing a rank at random, every run restarted from its newest checkpoint as often
   as needed; the measured useful steps per second beside the model (`models/recovery.py`) fed with
   this machine's step, stall and recovery times, and Young/Daly's optimum marked; a plot; the
   restarts' time to recover, phase by phase.
3. The three ways against each other: `run train` with rank 1 SIGKILLed mid-run, recovered by a
   restart from its checkpoint, live by a replacement that copies a survivor's state (`peer`), and by
   the survivors going on as fewer ranks (`shrink`), round by round: each recovery's phases, the
   steps redone, the final parameters against the run without the fault.

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
    checkpoints' stall and write (the slowest rank's medians), its restarts' times by phase."""
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
        "restarts": [{k: r.get(k) for k in PHASES} for r in restarts if r.get("total_s") is not None],
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


MTBF_S = 3.0  # the drill's mean time between failures (--quick: 1 s): about ten failures a run
STEPS = 1500  # a run's steps under the drill (--quick: QUICK's 300)
PHASES = ("teardown_s", "restart_s", "load_s", "warmup_s", "total_s")


def goodput_part(ctx, runs: Path, stall: dict) -> tuple[list[str], dict]:
    """The sweep of `checkpoint_every` under the mtbf drill, beside the model: round after round
    (the drill's seed the round's, the same for every interval: the same failure times after each
    rendezvous), the intervals in turn, alternating their order."""
    mtbf_s = 1.0 if ctx.quick else MTBF_S
    intervals = (2, 10, 40) if ctx.quick else INTERVALS
    rounds = 1 if ctx.quick else ctx.rounds
    steps = () if ctx.quick else (f"params.steps={STEPS}",)
    baseline = figures(_run(ctx, runs, "recovery.mtbf_s=null", "params.checkpoint_every=0", *steps))
    step_s = baseline["period_s"]
    checkpoint_s = statistics.median(f["stall_s"] for f in stall["sync"])
    measured: dict[int, list[dict]] = {k: [] for k in intervals}
    for r in range(rounds):
        for k in intervals if r % 2 == 0 else reversed(intervals):
            drill = (f"recovery.mtbf_s={mtbf_s}", f"recovery.seed={r + 1}", f"params.checkpoint_every={k}")
            measured[k].append(figures(_run(ctx, runs, *drill, *steps)))
    restarts = [t for runs_k in measured.values() for f in runs_k for t in f["restarts"]]
    recover_s = statistics.median(t["total_s"] for t in restarts) if restarts else 0.0
    best = model.young_daly_steps(step_s, checkpoint_s, mtbf_s)
    rows = [goodput_row(k, runs_k) for k, runs_k in measured.items()]
    for row in rows:  # the model with the stall measured without faults, and with the sweep's own
        row["model"] = model.goodput(row["k"], step_s, checkpoint_s, recover_s, mtbf_s)
        row["model_own"] = model.goodput(row["k"], step_s, row["stall"], recover_s, mtbf_s)
    lines = [
        "## Goodput against the checkpoint interval\n",
        f"`run {SCENARIO}` with the mtbf drill (a rank SIGKILLed at exponential intervals of "
        f"{mtbf_s:g} s after each rendezvous) at each `checkpoint_every`, synchronous checkpoints, every "
        "failure restarted from the newest whole checkpoint: useful steps per second, restarts "
        "included (the steps' first start to their last end). Median (min-max) over "
        f"{rounds} round(s), round r drawing its failures from seed r for every interval. The model "
        "(`playground/models/recovery.py`, Daly's) takes this machine's step "
        f"({1e3 * step_s:.1f} ms, a run without checkpoints), the checkpoint's stall "
        f"C = {1e3 * checkpoint_s:.1f} ms (above) and the median time to recover R = {recover_s:.2f} s "
        f"(below); Young/Daly's optimum sqrt(2 C M) is {best:.1f} steps.\n",
        "| checkpoint every (steps) | failures (median) | goodput (steps/s) | model (steps/s) | measured / model "
        "| stall under the drill (ms) | model with it | measured / it |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['k']} | {r['failures']:g} | {r['measured']:.2f} ({r['low']:.2f}-{r['high']:.2f}) | "
        f"{r['model']:.2f} | {r['measured'] / r['model']:.2f} | {1e3 * r['stall']:.1f} | "
        f"{r['model_own']:.2f} | {r['measured'] / r['model_own']:.2f} |"
        for r in rows
    ]
    lines.append(
        f"\nWithout failures or checkpoints the step runs at {1 / step_s:.2f} steps/s. The stall under "
        "the drill is the median over the interval's runs of each run's slowest rank's median "
        "checkpoint: beside C, it says how much of the gap to the model is the checkpoints' cost "
        "when failures and restarts come with them.\n"
    )
    plot = goodput_plot(ctx.out / "recovery-goodput.svg", rows, step_s, checkpoint_s, recover_s, mtbf_s)
    lines.append(f"![goodput against the checkpoint interval]({plot.name})\n")
    lines += restart_lines(restarts)
    return lines, {
        "rows": rows,
        "step_s": step_s,
        "checkpoint_s": checkpoint_s,
        "recover_s": recover_s,
        "best": best,
    }


def goodput_row(k: int, runs: list[dict]) -> dict:
    """An interval's runs (`figures`): the failures' median, goodput's median and range."""
    goodputs = [f["goodput"] for f in runs]
    return {
        "k": k,
        "stall": statistics.median(f["stall_s"] or 0.0 for f in runs),
        "failures": statistics.median(len(f["restarts"]) for f in runs),
        "measured": statistics.median(goodputs),
        "low": min(goodputs),
        "high": max(goodputs),
    }


def restart_lines(restarts: list[dict]) -> list[str]:
    """The time to recover of every restart of the sweep, phase by phase (median, min-max)."""
    if not restarts:
        return ["No restart happened: the runs ended before the drill's first kill.\n"]

    def cell(key: str) -> str:
        values = [t[key] for t in restarts if t.get(key) is not None]
        if not values:
            return "-"
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    return [
        "### The time to recover\n",
        f"Every restart of the sweep ({len(restarts)}), each a rank SIGKILLed from outside: teardown "
        "(every rank of the group killed and reaped, its scratch removed), restart (the newest whole "
        "checkpoint chosen and its checksums verified, the ranks forked and registered), load (the "
        "slowest rank's read of its part), warm-up (the first step after the load, less one usual "
        "step). The detection of a kill from outside has no known start. Seconds, median (min-max).\n",
        "| teardown | restart | load | warm-up | total |",
        "|---:|---:|---:|---:|---:|",
        "| " + " | ".join(cell(k) for k in PHASES) + " |",
        "",
    ]


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


WAYS = ("restart", "peer", "shrink")
WAY_RUN = (
    "params.steps=100",
    "params.sample_bytes=0",
    "fault.action=kill",
    "fault.rank=1",
    "fault.after_ops=400",
)
WAY_PHASES = ("detection_s", *PHASES)


def _train(ctx, runs: Path, *pairs: str) -> dict:
    """`run train --max-restarts 1 --set ...`: its result.json."""
    ctx.run("run", "train", "--max-restarts", "1", "--out", str(runs), *sets(pairs))
    return json.loads((ctx.latest(runs) / "result.json").read_text())


def way_pairs(way: str) -> tuple[str, ...]:
    """One way's run: a checkpoint every 10 steps for a restart to go on from (shrink takes none)."""
    return (*WAY_RUN, f"recovery.way={way}", f"params.checkpoint_every={0 if way == 'shrink' else 10}")


def ways_part(ctx, runs: Path) -> list[str]:
    """Restart, peer and shrink on the same run and fault, the order rotating round by round."""
    rounds = 1 if ctx.quick else ctx.rounds
    clean = _train(ctx, runs, *WAY_RUN[:2])["modes"][0]["hashes"][0]
    seen: dict[str, list[dict]] = {w: [] for w in WAYS}
    for r in range(rounds):
        for way in WAYS[r % 3 :] + WAYS[: r % 3]:
            result = _train(ctx, runs, *way_pairs(way))
            for restart in (result.get("recovery") or {}).get("restarts") or []:
                same = set(result["modes"][0]["hashes"]) == {clean}
                seen[way].append({**restart, "same": same})
    return way_lines(seen, clean)


def way_lines(seen: dict[str, list[dict]], clean: str) -> list[str]:
    """The three ways' table: each phase's median (min-max) over the recoveries, steps redone, and
    how many ended with the fault-free run's parameters."""

    def cell(rows: list[dict], key: str) -> str:
        values = [x[key] for x in rows if x.get(key) is not None]
        if not values:
            return "-"
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    lines = [
        "## Three ways to recover\n",
        "`run train` (bucketed, float32, 2 ranks, 100 steps), rank 1 SIGKILLed at its 401st post (in "
        "the 40th step): a **restart** of the whole group from its newest checkpoint (every 10 steps), "
        "**peer** (a replacement for rank 1 alone, the survivor's parameters and Adam state copied to "
        "it, no checkpoint read) and **shrink** (no replacement: the survivor goes on alone with the "
        "whole batch, no checkpoint taken). Seconds, median (min-max) over the recoveries; re-form: "
        "restart and rendezvous, or the survivors' new group; load: the checkpoint's read, or the "
        "state's transfer. Same parameters: the run's final parameters hashed against the run without "
        f"the fault ({clean}).\n",
        "| way | recoveries | detection | teardown | restart / re-form | load / transfer | warm-up | time to "
        "recover | steps redone | same parameters |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for way, rows in seen.items():
        redone = [x["steps_redone"] for x in rows if x.get("steps_redone") is not None]
        lines.append(
            f"| {way} | {len(rows)} | "
            + " | ".join(cell(rows, k) for k in WAY_PHASES)
            + f" | {f'{statistics.median(redone):g}' if redone else '-'} | {sum(x['same'] for x in rows)} of {len(rows)} |"
        )
    return [
        *lines,
        "",
        "A restart also trains again the steps since its checkpoint; a live recovery loses at most the "
        "step in flight and reads no checkpoint; a shrunk group pays instead with slower steps for the "
        "rest of the run (here one rank does the work of two). A shrunk group's parameters equal the "
        "fault-free run's to rounding in general (its gradient sums can be taken in another order, "
        "docs/recovery.md); the last column says whether they came out bit for bit (from 2 ranks to 1 "
        "the two halves are added once, as the all-reduce added them).\n",
    ]


def section(ctx) -> str:
    runs = ctx.work / "runs"
    stall_lines, stall = stall_part(ctx, runs)
    goodput_lines, _ = goodput_part(ctx, runs, stall)
    return "\n".join([*stall_lines, "", *goodput_lines, "", *ways_part(ctx, runs)]) + "\n"
