"""The simulator against this machine (`results --sections simulator`): calibrate once, predict every row.

One `calibrate`, then `rounds` rounds of `bench allreduce` (ring, tree, hd, rd) at every rank count
from 2 to 8 and every size of `SIZES`, over ipc and shm, then `simulate --link calibration.json
--measured ...` per transport: the simulated time of each row beside the measured median of the
rounds. The rows the calibration never ran (3, 5, 6 or 7 ranks; 64 KiB... the sizes it did not
ping-pong) are marked held out: the model is judged by those too. The page has every row (measured
median and spread, simulated, sim/measured, the closed form where it applies), how many are within
25% and within 2x, the worst rows, and a plot of simulated against measured on log axes with the
25% band.

The sweep is long (about 35 min here with 3 rounds), so it is kept in pieces: each bench run goes to
a directory of its own (`<transport>-n<N>-r<round>`) and is not run again when its result is there;
`--continue` reuses the last results directory and `--max-minutes` stops starting new pieces after
that long, so the page can be measured a few minutes at a time on a shared machine.
"""

import json
import math
import statistics
import time
from pathlib import Path

from playground.core.sizes import format_size
from playground.models.band import BAND
from playground.models.band import within as ratio_within

SIZES = "4KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB"
RANKS = (2, 3, 4, 5, 6, 7, 8)
ALGOS = "ring,tree,hd,rd"
TRANSPORTS = ("ipc", "shm")
SIM_ROUNDS = 3  # simulations per transport, each row their median
GAP_S = 300  # commands further apart than this were measured in another sitting


def rows_from(sim_results: list[dict], benches: dict[tuple, list[float]], calibrated: dict) -> list[dict]:
    """One row per simulated point that was measured: measured median and spread over the rounds,
    simulated, their ratio, the closed form and whether the calibration ran this rank count and size
    (`calibrated`: {'ranks': [...], 'sizes': [...]})."""
    out = []
    for result in sim_results:
        transport = result["simulation"]["transport"]
        for r in result["rows"]:
            times = benches.get((transport, r["ranks"], r["algorithm"], r["size"]))
            if not times:
                continue
            measured = statistics.median(times)
            out.append(
                {
                    "transport": transport,
                    "ranks": r["ranks"],
                    "size": r["size"],
                    "algorithm": r["algorithm"],
                    "measured_us": measured,
                    "low_us": min(times),
                    "high_us": max(times),
                    "rounds": len(times),
                    "simulated_us": r["time_us"],
                    "ratio": r["time_us"] / measured,
                    "model_us": r.get("model_us"),
                    "held_out": r["ranks"] not in calibrated["ranks"] or r["size"] not in calibrated["sizes"],
                }
            )
    return out


def median_simulation(runs: list[dict]) -> dict:
    """The first run's result with each row's time the median over the runs (the simulator times the
    ranks' Python as it runs, so one process's run can be a few percent off another's)."""
    times: dict[tuple, list[float]] = {}
    for result in runs:
        for r in result["rows"]:
            times.setdefault((r["ranks"], r["algorithm"], r["size"]), []).append(r["time_us"])
    first = runs[0]
    rows = [
        {**r, "time_us": statistics.median(times[(r["ranks"], r["algorithm"], r["size"])])}
        for r in first["rows"]
    ]
    return {**first, "rows": rows}


def within(rows: list[dict], factor: float) -> int:
    """Rows whose simulated time is within `factor` of the measured one (1.25: 25%, both ways)."""
    return sum(ratio_within(r["ratio"], factor - 1) for r in rows)


def summary(rows: list[dict]) -> list[str]:
    held = [r for r in rows if r["held_out"]]
    lines = [
        f"**{within(rows, 1 + BAND)} of {len(rows)} simulated times are within 25% of the measured median, "
        f"{within(rows, 2)} within 2x** (held-out rows: {within(held, 1 + BAND)} of {len(held)} within 25%, "
        f"{within(held, 2)} within 2x).",
    ]
    worst = sorted(rows, key=lambda r: -abs(math.log(r["ratio"])))[:5]
    if worst:
        lines.append(
            "Worst rows: "
            + "; ".join(
                f"{r['transport']} {r['ranks']} ranks {r['algorithm']} {format_size(r['size'])} {r['ratio']:.2f}"
                for r in worst
            )
            + "."
        )
    return lines


def table(rows: list[dict]) -> list[str]:
    out = [
        "| transport | ranks | size | algo | measured (us) | spread | simulated (us) | sim/measured | closed form (us) | held out |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["transport"], r["ranks"], r["algorithm"], r["size"])):
        model = f"{r['model_us']:,.0f}" if r.get("model_us") else "sim"
        out.append(
            f"| {r['transport']} | {r['ranks']} | {format_size(r['size'])} | {r['algorithm']} | "
            f"{r['measured_us']:,.0f} | {r['low_us']:,.0f}-{r['high_us']:,.0f} | {r['simulated_us']:,.0f} | "
            f"{r['ratio']:.2f} | {model} | {'yes' if r['held_out'] else ''} |"
        )
    return out


def plot(rows: list[dict], path: Path) -> Path:
    """Simulated against measured, log axes, the diagonal and the 25% band; one colour a transport.
    Written as SVG where the docs keep it (the repository ignores PNGs, which runs write)."""
    from playground.display.plot import figure

    with figure(path, (6.5, 6)) as (_, ax):
        values = [v for r in rows for v in (r["measured_us"], r["simulated_us"])]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="simulated = measured")
        ax.fill_between(
            [lo, hi], [lo / (1 + BAND), hi / (1 + BAND)], [lo * (1 + BAND), hi * (1 + BAND)],
            color="tab:green", alpha=0.15, label="within 25%",
        )  # fmt: skip
        for transport, marker in (("ipc", "o"), ("shm", "s"), ("tcp", "^")):
            mine = [r for r in rows if r["transport"] == transport]
            if not mine:
                continue
            for held, face in ((False, None), (True, "none")):
                pts = [r for r in mine if r["held_out"] == held]
                if pts:
                    ax.scatter(
                        [r["measured_us"] for r in pts], [r["simulated_us"] for r in pts], s=14, marker=marker,
                        facecolors=face, edgecolors="tab:blue" if transport == "ipc" else "tab:orange",
                        color=None if face else ("tab:blue" if transport == "ipc" else "tab:orange"),
                        label=f"{transport}{' (held out)' if held else ''}",
                    )  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (us, median of the rounds)")
        ax.set_ylabel("simulated (us)")
        ax.set_title("all-reduce on this machine: simulated from one calibration")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def _sittings(stamps: list[str]) -> str:
    """', in N sittings (`--continue`)' when the commands' times have gaps of more than GAP_S."""
    times = [time.mktime(time.strptime(t, "%Y-%m-%d %H:%M:%S")) for t in stamps]
    n = 1 + sum(b - a > GAP_S for a, b in zip(times, times[1:], strict=False))
    return f", in {n} sittings (`--continue`, `--max-minutes`)" if n > 1 else ", in one sitting"


def _bench_times(pieces: list[Path]) -> dict[tuple, list[float]]:
    times: dict[tuple, list[float]] = {}
    for d in pieces:
        result = json.loads((d / "latest" / "result.json").read_text())
        for r in result["rows"]:
            key = (result["transport"], result["ranks"], r["algorithm"], r["size"])
            times.setdefault(key, []).append(r["time_us"])
    return times


def section(ctx) -> str:
    """The page's body (results.py calls it with its Context: `run`, `work`, `rounds`, `quick`)."""
    transports = TRANSPORTS[:1] if ctx.quick else TRANSPORTS
    ranks = (2, 3) if ctx.quick else RANKS
    sizes = "4KiB,256KiB" if ctx.quick else SIZES
    log = ctx.work / "commands.txt"  # every measuring command of every piece, for the page's header
    ctx.commands[:0] = [line.split("\t", 1)[1] for line in _lines(log)]
    calibration = ctx.work / "calibration.json"
    pieces, missing = _measure(ctx, log, calibration, transports, ranks, sizes)
    record = json.loads(calibration.read_text())
    calibrated = {
        "ranks": sorted({p["ranks"] for e in record["transports"].values() for p in e["patterns"]}),
        "sizes": sorted({p["size"] for e in record["transports"].values() for p in e["patterns"]}),
    }
    sim_results = [_simulate(ctx, calibration, transport, ranks, sizes) for transport in transports]
    rows = rows_from(sim_results, _bench_times(pieces), calibrated)
    return _body(ctx, rows, calibrated, missing, [line.split("\t", 1)[0] for line in _lines(log)])


def _measure(
    ctx, log: Path, calibration: Path, transports: tuple[str, ...], ranks: tuple[int, ...], sizes: str
) -> tuple[list[Path], int]:
    """The calibration and every round's benches not measured yet (each command logged with its
    time, for the page); (every bench's directory, how many are still missing past --max-minutes)."""
    work, started = ctx.work, time.monotonic()

    def measure(*args: str) -> None:
        ctx.run(*args)
        work.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}\t{ctx.commands[-1]}\n")

    if not calibration.is_file():
        where = ["--out", str(calibration), "--work", str(work / "calibrate")]
        quick = ["--sizes", "64,4KiB,64KiB,1MiB"] if ctx.quick else []
        measure("calibrate", *where, "--transports", ",".join(transports), *quick)
    pieces, missing = [], 0
    for k in range(_rounds(ctx)):  # round by round, so the rounds of one point are minutes apart
        for transport in transports:
            for n in ranks:
                d = work / f"{transport}-n{n}-r{k + 1}"
                if not (d / "latest" / "result.json").is_file():
                    if ctx.out_of_time(started):
                        missing += 1
                        continue
                    measure(
                        "bench", "allreduce", "--ranks", str(n), "--transport", transport, "--algo", ALGOS,
                        "--sizes", sizes, "--iters", "10", "--warmup", "2", "--link", str(calibration), "--out", str(d),
                    )  # fmt: skip
                pieces.append(d)
    return pieces, missing


def _rounds(ctx) -> int:
    return 1 if ctx.quick else ctx.rounds


def _simulate(ctx, calibration: Path, transport: str, ranks: tuple[int, ...], sizes: str) -> dict:
    """The median of SIM_ROUNDS simulations of every row from the calibration, each its own process."""
    runs = []
    for _ in range(SIM_ROUNDS):
        ctx.run(
            "simulate", "allreduce", "--link", str(calibration), "--transport", transport,
            "--ranks", ",".join(map(str, ranks)), "--algo", ALGOS, "--sizes", sizes, "--no-data",
            "--out", str(ctx.work / "simulate"),
        )  # fmt: skip
        runs.append(json.loads((ctx.work / "simulate" / "latest" / "result.json").read_text()))
    return median_simulation(runs)


def _body(ctx, rows: list[dict], calibrated: dict, missing: int, stamps: list[str]) -> str:
    """What the page says: how the rows were made, when, what is missing, the summary, plot and table."""
    lines = [
        "One calibration (`calibrate`: ping-pongs at "
        + ", ".join(map(str, calibrated["ranks"]))
        + " ranks and sizes "
        + ", ".join(format_size(s) for s in calibrated["sizes"])
        + "), then every row simulated from it (`simulate --link calibration.json`) beside the median of "
        f"{_rounds(ctx)} round(s) of `bench allreduce` (min-max beside it). Rows at rank counts or sizes the "
        "calibration did not run are held out. The closed form is the alpha-beta-gamma formula on the "
        "calibrated link where ranks do not outnumber cores; beyond, only the simulator models it (sim). "
        f"The simulator times the ranks' own Python as it runs (as SMPI times computation), so each row is "
        f"the median of {SIM_ROUNDS} simulations, each in a process of its own; writing the page again still "
        "moves a few ratios by a few percent.\n",
    ]
    if stamps:
        lines.append(
            f"The measuring commands above ran from {stamps[0]} to {stamps[-1]}{_sittings(stamps)}; the "
            "date above is when the page was last written from them (the simulation again).\n"
        )
    if missing:
        lines.append(
            f"**Partial**: {missing} bench runs not measured yet; `python -m playground results --sections "
            "simulator --continue` measures the rest.\n"
        )
    if rows:
        lines += summary(rows) + [""]
        lines.append(
            f"![simulated against measured]({plot(rows, ctx.out / 'simulator-accuracy.svg').name})\n"
        )
        lines += table(rows)
    if not ctx.quick and not missing:
        lines.append("\n" + simulator_cost(ctx))
    return "\n".join(lines) + "\n"


def simulator_cost(ctx) -> str:
    """The simulator's own speed: the 1024-rank 1 GiB ring on the lecture's InfiniBand."""
    import re

    t0 = time.monotonic()
    ctx.run(
        "simulate", "allreduce", "--algo", "ring", "--ranks", "1024", "--sizes", "1GiB", "--link", "ib",
        "--out", str(ctx.work / "simulate"),
    )  # fmt: skip
    wall_s = time.monotonic() - t0
    notes = json.loads((ctx.work / "simulate" / "latest" / "result.json").read_text())["notes"]
    said = next((m for n in notes if (m := re.search(r"simulated ([\d,]+) messages", n))), None)
    rate = f", {int(said.group(1).replace(',', '')) / wall_s:,.0f} messages/s" if said else ""
    return (
        "## The simulator's own cost\n\n"
        f"`simulate allreduce --algo ring --ranks 1024 --sizes 1GiB`: {wall_s:.1f} s of wall time "
        f"(the whole command){rate}.\n"
    )
