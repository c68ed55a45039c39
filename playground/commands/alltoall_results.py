"""All-to-all, gather, scatter and send/recv on this machine (`results --sections alltoall`).

Three parts, each from the commands a user types:
1. Against the anchors: `bench alltoall|gather|scatter|sendrecv --transport shm --baseline gloo,mpi`
   at 2, 4 and 8 ranks from 64 KiB up, `--rounds` times; per cell the median of the rounds of ours
   (the best algorithm per size), Gloo's and MPICH's, out of place against out of place and in place
   against in place, and how many cells meet the goal (at least MPICH's speed, at least 2x Gloo's).
2. The model's picks on real ranks: `bench alltoall --algo pairwise,bruck,scattered` over sizes a
   factor of 2 apart at 2, 4 and 8 ranks; per (ranks, size) the measured fastest against the
   calibrated model's pick (the closed form where every rank has a core, the simulator on the
   calibrated host beyond: bench's model column), and where the pairwise exchange overtakes Bruck's,
   measured and modelled.
3. The same in the simulator to 1024 ranks, on the lecture's InfiniBand: `simulate alltoall
   --crossover`, its fastest algorithm against the closed forms' pick, and the crossovers.
Each run goes to a directory of its own and is kept: `--continue` and `--max-minutes` measure the
page in pieces.
"""

import json
import math
import statistics
import time
from pathlib import Path

from playground.core.sizes import format_size, parse_size

TRANSPORT = "shm"
ANCHOR_COLLECTIVES = ("alltoall", "gather", "scatter", "sendrecv")
ANCHOR_RANKS = (2, 4, 8)
ANCHOR_SIZES = "64KiB,1MiB,16MiB"
PICK_RANKS = (2, 4, 8)
PICK_SIZES = "256..16MiB"  # doubling: the crossover is read between neighbours a factor of 2 apart
PICK_ALGOS = ("pairwise", "bruck", "scattered")
SIM_RANKS = "8,32,128,512,1024"
SIM_SIZES = "64..4MiB"
NOISE = 0.10  # a pick within 10% of the fastest measured time counts as near it


def median(values: list[float]) -> float:
    return statistics.median(values)


def anchor_cells(results: list[dict]) -> list[dict]:
    """One cell per (collective, ranks, size, form) from bench runs with baselines (result.json's
    `comparison`): the median over the runs of ours, Gloo's and MPICH's times and their ratios."""
    cells: dict[tuple, dict] = {}
    for result in results:
        for row in result.get("comparison") or []:
            key = (result["collective"], result["ranks"], parse_size(row["size"]), row["form"])
            cell = cells.setdefault(key, {"ours": [], "algos": [], "gloo": [], "mpi": []})
            cell["ours"].append(row["ours_us"])
            cell["algos"].append(row["ours"])
            for name in ("gloo", "mpi"):
                if row.get(f"{name}_us") is not None:
                    cell[name].append(row[f"{name}_us"])
    out = []
    for (collective, ranks, size, form), cell in cells.items():
        ours = median(cell["ours"])
        row = {"collective": collective, "ranks": ranks, "size": size, "form": form, "ours_us": ours}
        row["algorithm"] = max(set(cell["algos"]), key=cell["algos"].count)
        for name in ("gloo", "mpi"):
            theirs = median(cell[name]) if cell[name] else None
            row[f"{name}_us"] = theirs
            row[f"x_{name}"] = theirs / ours if theirs is not None and ours > 0 else None
        out.append(row)
    return out


def anchor_verdict(cells: list[dict]) -> str:
    """'ours at least MPICH's speed in a of b cells, at least 2x Gloo's in c of d'."""
    mpi = [c["x_mpi"] for c in cells if c["x_mpi"] is not None]
    gloo = [c["x_gloo"] for c in cells if c["x_gloo"] is not None]
    return (
        f"**Ours at least MPICH's speed in {sum(x >= 1 for x in mpi)} of {len(mpi)} cells, at least twice "
        f"Gloo's in {sum(x >= 2 for x in gloo)} of {len(gloo)}** (shared memory, 64 KiB and up)."
    )


def pick_cells(results: list[dict]) -> list[dict]:
    """One cell per (ranks, size) from `bench alltoall` runs with the model column: each algorithm's
    median measured time and model time over the runs, the fastest measured, the model's pick,
    whether the pick is the fastest (`hit`) or within NOISE of it (`near`), and in how many of the
    runs (`rounds`) that fastest was also the run's own (`agree`): where the runs disagree the
    algorithms are closer than the machine's noise, and no model can be expected to order them."""
    times: dict[tuple, list[float]] = {}
    models: dict[tuple, list[float]] = {}
    per_run: dict[tuple, list[str]] = {}
    for result in results:
        own: dict[int, dict[str, float]] = {}
        for r in result["rows"]:
            key = (result["ranks"], r["size"], r["algorithm"])
            times.setdefault(key, []).append(r["time_us"])
            own.setdefault(r["size"], {})[r["algorithm"]] = r["time_us"]
            if r.get("model_us") is not None:
                models.setdefault(key, []).append(r["model_us"])
        for size, measured in own.items():
            timed = {a: t for a, t in measured.items() if a in PICK_ALGOS}
            if timed:
                per_run.setdefault((result["ranks"], size), []).append(min(timed, key=timed.__getitem__))
    out = []
    for ranks, size in sorted({(n, s) for n, s, _ in times}):
        measured = {a: median(times[(ranks, size, a)]) for a in PICK_ALGOS if (ranks, size, a) in times}
        modelled = {a: median(models[(ranks, size, a)]) for a in PICK_ALGOS if (ranks, size, a) in models}
        if not measured or set(modelled) != set(measured):
            continue
        fastest = min(measured, key=measured.__getitem__)
        pick = min(modelled, key=modelled.__getitem__)
        runs = per_run.get((ranks, size), [])
        out.append(
            {
                "ranks": ranks,
                "size": size,
                "measured": measured,
                "model": modelled,
                "fastest": fastest,
                "pick": pick,
                "hit": pick == fastest,
                "near": measured[pick] <= measured[fastest] * (1 + NOISE),
                "rounds": len(runs),
                "agree": runs.count(fastest),
            }
        )
    return out


def crossover(times: dict[int, tuple[float, float]]) -> float | None:
    """The size from which `later` (the pairwise exchange) stays faster than `first` (Bruck), read
    on the log-log line between the two swept sizes around the last change (size -> (first, later)
    times); 0.0 when it is faster at every size, None when it never overtakes."""
    sizes = sorted(times)
    ahead = [times[s][1] < times[s][0] for s in sizes]
    if not ahead or not ahead[-1]:
        return None
    k = len(ahead) - 1
    while k > 0 and ahead[k - 1]:
        k -= 1
    if k == 0:
        return 0.0
    (s0, s1), (r0, r1) = (sizes[k - 1], sizes[k]), (times[sizes[k - 1]], times[sizes[k]])
    g0, g1 = math.log(r0[1] / r0[0]), math.log(r1[1] / r1[0])  # log(later / first): > 0, then < 0
    f = g0 / (g0 - g1) if g0 != g1 else 0.5
    return math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))


def crossovers(cells: list[dict], model_s_star: dict[int, float | None] | None = None) -> list[dict]:
    """Per rank count: where the pairwise exchange overtakes Bruck's, measured (or simulated) and
    modelled (read from the cells' model times, or given: the closed forms' exact S*), and their
    ratio (the goal: within 2x). At 2 and 3 ranks Bruck sends as many messages as the pairwise
    exchange: no crossover to judge."""
    out = []
    for ranks in sorted({c["ranks"] for c in cells}):
        if ranks <= 3:
            continue
        mine = [c for c in cells if c["ranks"] == ranks and {"bruck", "pairwise"} <= set(c["measured"])]
        measured = crossover({c["size"]: (c["measured"]["bruck"], c["measured"]["pairwise"]) for c in mine})
        if model_s_star is not None:
            modelled = model_s_star.get(ranks)
        else:
            modelled = crossover({c["size"]: (c["model"]["bruck"], c["model"]["pairwise"]) for c in mine})
        ratio = modelled / measured if measured and modelled else None
        out.append({"ranks": ranks, "measured": measured, "model": modelled, "ratio": ratio})
    return out


def _size(value: float | None) -> str:
    if value is None:
        return "never (in the sweep)"
    return "below the sweep" if value == 0 else format_size(round(value))


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def anchor_table(cells: list[dict]) -> list[str]:
    out = [
        "| collective | ranks | size | form | ours (us) | algo | Gloo (us) | MPICH (us) | x Gloo | x MPICH |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for c in sorted(cells, key=lambda c: (c["collective"], c["form"], c["ranks"], c["size"])):
        ratios = [f"{c[k]:.2f}" if c[k] is not None else "-" for k in ("x_gloo", "x_mpi")]
        out.append(
            f"| {c['collective']} | {c['ranks']} | {format_size(c['size'])} | {c['form']} | {_us(c['ours_us'])} | "
            f"{c['algorithm']} | {_us(c['gloo_us'])} | {_us(c['mpi_us'])} | {ratios[0]} | {ratios[1]} |"
        )
    return out


def pick_table(cells: list[dict], measured_name: str = "measured") -> list[str]:
    algos = " | ".join(f"{a} (us)" for a in PICK_ALGOS)
    rounds = any(c["rounds"] > 1 for c in cells)
    out = [
        f"| ranks | size | {algos} | fastest ({measured_name}) |"
        + (" fastest in rounds |" if rounds else "")
        + " model's pick | |",
        "|---:|---:|" + "---:|" * len(PICK_ALGOS) + ("---|---:|---|---|" if rounds else "---|---|---|"),
    ]
    for c in cells:
        times = " | ".join(_us(c["measured"].get(a)) for a in PICK_ALGOS)
        mark = "yes" if c["hit"] else ("near" if c["near"] else "**no**")
        agree = f" {c['agree']} of {c['rounds']} |" if rounds else ""
        out.append(
            f"| {c['ranks']} | {format_size(c['size'])} | {times} | {c['fastest']} |{agree} {c['pick']} | {mark} |"
        )
    return out


def pick_verdict(cells: list[dict], crosses: list[dict], what: str) -> str:
    hits, near = sum(c["hit"] for c in cells), sum(c["near"] for c in cells)
    judged = [x for x in crosses if x["ratio"] is not None]
    within = sum(0.5 <= x["ratio"] <= 2 for x in judged)
    steady = [c for c in cells if c["rounds"] > 1 and c["agree"] == c["rounds"]]
    agreed = (
        f"; in the {len(steady)} cell{'' if len(steady) == 1 else 's'} whose every round had the same "
        "fastest, it picks it in "
        f"{sum(c['hit'] for c in steady)}"
        if any(c["rounds"] > 1 for c in cells)
        else ""
    )
    return (
        f"**The model picks the {what} fastest in {hits} of {len(cells)} cells** ({near} within "
        f"{NOISE:.0%} of the fastest{agreed}); its Bruck/pairwise crossover is within 2x of the {what} one "
        f"at {within} of {len(judged)} rank counts that have both."
    )


def crossover_lines(crosses: list[dict], what: str) -> list[str]:
    out = [
        f"| ranks | pairwise beats Bruck from ({what}) | (model) | model / {what} |",
        "|---:|---:|---:|---:|",
    ]
    for x in crosses:
        ratio = f"{x['ratio']:.2f}" if x["ratio"] is not None else "-"
        out.append(f"| {x['ranks']} | {_size(x['measured'])} | {_size(x['model'])} | {ratio} |")
    return out


def sim_cells(result: dict) -> list[dict]:
    """`simulate alltoall`'s rows as pick cells: the simulated times against the closed forms'. A
    size below one element a peer (64 B on 32 ranks) is rounded down to nothing to send, which every
    algorithm does in no time: no cell."""
    by_ranks: dict[int, list[dict]] = {}
    for r in result["rows"]:
        if r.get("model_us") is not None and r["size"] > 0:
            by_ranks.setdefault(r["ranks"], []).append(r)
    return pick_cells([{"ranks": n, "rows": rows} for n, rows in sorted(by_ranks.items())])


def _load(run_dir: Path) -> dict:
    return json.loads((run_dir / "latest" / "result.json").read_text())


def section(ctx) -> str:
    """The page's body (results.py calls it with its Context: `run`, `work`, `rounds`, `quick`).
    (Longer than most: the runs, round by round, then the page in the order it reads.)"""
    started = time.monotonic()
    rounds = 1 if ctx.quick else ctx.rounds
    missing = 0

    def piece(name: str, *args: str) -> Path | None:
        """A bench run in its own directory, kept for `--continue`; None when out of time."""
        nonlocal missing
        d = ctx.work / name
        if not (d / "latest" / "result.json").is_file():
            if ctx.out_of_time(started):
                missing += 1
                return None
            ctx.run(*args, "--out", str(d), timeout_s=3600)
        return d

    anchors, picks = [], []
    collectives = ANCHOR_COLLECTIVES[:1] + ANCHOR_COLLECTIVES[-1:] if ctx.quick else ANCHOR_COLLECTIVES
    ranks = (2,) if ctx.quick else ANCHOR_RANKS
    for k in range(rounds):  # round by round: a point's rounds are minutes apart
        for collective in collectives:
            for n in ranks:
                d = piece(
                    f"anchor-{collective}-n{n}-r{k + 1}", "bench", collective, "--ranks", str(n),
                    "--transport", TRANSPORT, "--sizes", "64KiB" if ctx.quick else ANCHOR_SIZES,
                    "--iters", "10", "--warmup", "3", "--baseline", "gloo,mpi",
                )  # fmt: skip
                if d is not None:
                    anchors.append(_load(d))
        for n in (2, 4) if ctx.quick else PICK_RANKS:
            d = piece(
                f"picks-n{n}-r{k + 1}", "bench", "alltoall", "--ranks", str(n), "--transport", TRANSPORT,
                "--algo", ",".join(PICK_ALGOS), "--sizes", "256,64KiB" if ctx.quick else PICK_SIZES,
                "--iters", "20", "--warmup", "5",
            )  # fmt: skip
            if d is not None:
                picks.append(_load(d))
    lines = ["## Against Gloo and MPICH, over shared memory\n"]
    lines.append(
        f"`bench COLLECTIVE --transport {TRANSPORT} --baseline gloo,mpi`, each cell the median of "
        f"{rounds} round(s) (each the slowest rank's median of 10 calls after 3); ours is the best of its "
        "algorithms at that size; `x B` is B's time / ours (above 1: ours is faster).\n"
    )
    cells = anchor_cells(anchors)
    if cells:
        lines += [anchor_verdict(cells), "", *anchor_table(cells), ""]
    lines.append("## The model's pick, on this machine's ranks\n")
    lines.append(
        "`bench alltoall --algo pairwise,bruck,scattered` with the calibration's model column: at 2 ranks "
        "(a core each) the closed form on the calibrated link, beyond the simulator on the calibrated "
        "host. At each size the three take turns of 5 timed calls (each after a warm-up call), so what "
        f"slows the machine for a while slows them alike. Times are medians of {rounds} round(s); the "
        "crossover is read between the swept sizes.\n"
    )
    real = pick_cells(picks)
    if real:
        crosses = crossovers(real)
        lines += [
            pick_verdict(real, crosses, "measured"),
            "",
            *pick_table(real),
            "",
            *crossover_lines(crosses, "measured"),
            "",
        ]
    lines += sim_part(ctx)
    if missing:
        lines.append(
            f"\n**Partial**: {missing} runs not measured yet; `python -m playground results --sections "
            "alltoall --continue` measures the rest.\n"
        )
    return "\n".join(lines) + "\n"


def sim_part(ctx) -> list[str]:
    """The simulator to 1024 ranks: the three algorithms every 4x in size (the picks), and the two
    folded ones every 2x, further (the crossover, read between neighbours as on real ranks)."""
    ranks = "8,64" if ctx.quick else SIM_RANKS
    picks_dir, cross_dir = ctx.work / "simulate-picks", ctx.work / "simulate-crossover"
    ctx.run(
        "simulate", "alltoall", "--link", "ib", "--ranks", ranks, "--sizes", "1KiB,1MiB" if ctx.quick else SIM_SIZES,
        "--step", "4", "--algo", ",".join(PICK_ALGOS), "--fold", "--out", str(picks_dir),
    )  # fmt: skip
    ctx.run(
        "simulate", "alltoall", "--link", "ib", "--ranks", ranks, "--sizes", "64..64MiB", "--step", "2",
        "--algo", "pairwise,bruck", "--fold", "--crossover", "--out", str(cross_dir),
    )  # fmt: skip
    cells = sim_cells(_load(picks_dir))
    swept = _load(cross_dir)
    s_star = {r["ranks"]: r["model_bruck_bytes"] for t in swept["tables"][1:] for r in t["rows"]}
    crosses = crossovers(sim_cells(swept), s_star)
    return [
        "## The same in the simulator, to 1024 ranks\n",
        "`simulate alltoall --link ib --fold` (the lecture's InfiniBand; the scattered form is not folded: "
        "its ports' queues give every rank a timeline of its own): the simulated fastest against the "
        "closed forms' pick; the crossover from a second sweep of the two folded algorithms a factor of 2 "
        "apart, read between neighbours, against the model's exact S* (`--crossover`).\n",
        pick_verdict(cells, crosses, "simulated"),
        "",
        *pick_table(cells, "simulated"),
        "",
        *crossover_lines(crosses, "simulated"),
    ]
