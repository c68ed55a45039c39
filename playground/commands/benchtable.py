"""`python -m playground bench table`: the README's performance table, regenerated in one command.

For each rank count and round it runs the same all-reduce (float32 sum, the best of `--algo` per
size, each system in both forms it offers: in place and out of place, as nccl-tests reports both)
four ways, one after the other and never at once: ours over ZeroMQ (ipc, the default path), ours
over shared memory (shm), torch.distributed's Gloo (in place only: torch's all_reduce has no other
form) and MPICH through mpi4py (both). Each form gets its own tables, whose ratios set in-place
figures against in-place ones and out-of-place against out-of-place (benchtable_render.py).
The order of the four alternates from round to round, so a machine that gets busier or quieter
during the run does not favour one of them. Each run gives, per size, the slowest rank's median
over its timed iterations (what `bench` prints: 100 after 20 warm-up for the sizes shown as times,
10 after 3 for the others, or `--iters`/`--warmup` for all); the table shows, per row, the median
over the rounds with the min-max beside it, and speed ratios of the medians.

Small sizes (below 1 MiB) are shown as times, larger ones as busbw, as the README does. The table
goes to stdout and `table.md` (with `table.json`: every round's numbers) in a run directory.

With shm among the systems, each round also measures the machine's copy rate at every busbw size
(`bench copy`'s, best of 10) and the busbw tables give the physical bound (copybw.bound_ms: every
rank's buffer read once and written once, at the best rate measured at that size) and ours over
shm as a share of it, round by round.
A machine that is busy while it runs gives other numbers: the header says the CPU, the core count
and the load average before, during (max) and after.
"""

import io
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console

from playground.collectives.bench_report import FORMS
from playground.commands.benchtable_render import BASELINES, LABELS, TIME_BELOW_BYTES, render
from playground.commands.copybw import copy_rates
from playground.core.errors import ScenarioError
from playground.core.machine import usable_cores
from playground.core.sizes import parse_size_range

SYSTEMS = tuple(LABELS)
DEFAULT_SYSTEMS = "ipc,shm,gloo,mpi"
DEFAULT_SIZES = "8,4KiB,1MiB,16MiB,64MiB"
DEFAULT_RANKS = "2,4,8"
# (timed iterations, warm-up) of the sizes shown as times and of the others. A microsecond call
# timed 10 times right after start measures its warm-up (memos filled, pages touched: an 8-byte
# shm all-reduce 11-13 us at 10 after 3, 4.3-4.9 at 100 after 20); OSU's latency tests time 1000
# after 200 for the same reason. 100 keeps MPICH's 48 ms calls at 8 oversubscribed ranks bearable.
COUNTS = {"time": (100, 20), "busbw": (10, 3)}
COPY_PASSES = 10  # best of 10 copies per size and round: about a second at 16 and 64 MiB


def run_table(args) -> int:
    from playground.core.rundir import make_run_dir

    sizes = _parse_list(
        args.sizes if args.sizes != "8..64MiB" else DEFAULT_SIZES, parse_size_range, "--sizes"
    )
    rank_counts = _parse_list(args.rank_counts, lambda t: [int(v) for v in t.split(",")], "--rank-counts")
    if args.rounds < 1:
        raise ScenarioError(f"--rounds: at least 1, got {args.rounds}")
    systems = [s for s in (args.systems or DEFAULT_SYSTEMS).split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise ScenarioError(f"--systems {s!r}: allowed: {', '.join(SYSTEMS)}")
    algos = args.algo or "ring,tree,hd,rd"
    counts = {  # --iters / --warmup given: for every size
        kind: (args.iters or iters, warmup if args.warmup is None else args.warmup)
        for kind, (iters, warmup) in COUNTS.items()
    }
    groups = [
        (group, counts[kind])
        for kind, group in (
            ("time", [s for s in sizes if s < TIME_BELOW_BYTES]),
            ("busbw", [s for s in sizes if s >= TIME_BELOW_BYTES]),
        )
        if group
    ]
    err = Console(stderr=True, highlight=False)
    systems = _available(systems, err)
    run_dir = make_run_dir(Path(args.out), "table")
    runs: list[dict] = []  # one record per (round, ranks, system): its best row per form and size
    copies: list[dict] = []  # one record per (round, busbw size): the copy rates
    bw_sizes = [s for s in sizes if s >= TIME_BELOW_BYTES] if "shm" in systems else []
    loads = [os.getloadavg()[0]]
    t_start = time.monotonic()
    for rnd in range(args.rounds):
        order = systems if rnd % 2 == 0 else systems[::-1]
        for size in bw_sizes:
            one, all_ = copy_rates(size, COPY_PASSES)
            copies.append(
                {"round": rnd, "size": size, "one_core": one, "all_cores": all_, "cores": usable_cores()}
            )
        for n in rank_counts:
            for system in order:
                loads.append(os.getloadavg()[0])
                t0 = time.monotonic()
                best: dict[str, dict] = {}
                for group, (iters, warmup) in groups:
                    for form, rows in _measure(
                        system, n, group, algos, iters, warmup, args.timeout, run_dir
                    ).items():
                        best.setdefault(form, {}).update(rows)
                runs.append({"round": rnd, "ranks": n, "system": system, "load": loads[-1], "best": best})
                err.print(
                    f"round {rnd + 1}/{args.rounds}, {n} ranks, {LABELS[system]}: "
                    f"{time.monotonic() - t0:.1f} s (load {loads[-1]:.2f})"
                )
    loads.append(os.getloadavg()[0])
    command = "python -m playground bench table " + " ".join(sys.argv[3:])
    text = render(runs, sizes, rank_counts, systems, args.rounds, command, loads, counts, copies)
    print(text)
    (run_dir / "table.md").write_text(text)
    (run_dir / "table.json").write_text(
        json.dumps(
            {
                "command": command,
                "loads": loads,
                "counts": counts,
                "runs": runs,
                "copies": copies,
                "elapsed_s": time.monotonic() - t_start,
            }
        )
    )
    print(f"\nwritten: {run_dir / 'table.md'}")
    wrong = [b for r in runs for rows in r["best"].values() for b in rows.values() if b["wrong"] > 0]
    return 1 if wrong else 0


def _parse_list(text: str, parse, flag: str) -> list:
    try:
        return parse(text)
    except ValueError as e:
        raise ScenarioError(f"{flag} {text!r}: {e}") from None


def _available(systems: list[str], err: Console) -> list[str]:
    from playground.baselines import available

    out = []
    for s in systems:
        missing = available(s) if s in BASELINES else None
        if missing:
            err.print(f"{LABELS[s]} left out: {missing}")
        else:
            out.append(s)
    return out


def _measure(
    system: str, n: int, sizes: list[int], algos: str, iters: int, warmup: int, timeout_s: float, run_dir
) -> dict:
    """{form: {size: {"time_us", "busbw_gbps", "algorithm", "wrong"}}}: the best algorithm's figures
    per size in each form measured ("in place", "out of place"; a form the system does not offer is
    left out)."""
    if system in BASELINES:
        from playground.baselines import run_baseline

        rows = run_baseline(
            system,
            "allreduce",
            sizes,
            n,
            "float32",
            "sum",
            iters,
            warmup,
            timeout_s=max(300.0, timeout_s * 5),
        )
    else:
        from playground.config.scenario import load_scenario
        from playground.launcher.run import EXIT_INTERRUPTED, execute

        sets = [
            f"params.algorithm=[{algos}]",
            f"params.sizes=[{','.join(map(str, sizes))}]",
            f"params.iters={iters}",
            f"params.warmup={warmup}",
            "params.inplace=true",  # both forms, as the baselines
            "params.trace_messages=false",  # as bench: the baselines log nothing per message
            f"timeout_s={timeout_s}",
        ]
        scenario = load_scenario("bench", ranks=n, transport=system.split("-")[0], overrides=sets)
        saved = os.environ.get("PLAYGROUND_IPC_RING_MIN_BYTES")
        if system == "ipc-sockets":
            os.environ["PLAYGROUND_IPC_RING_MIN_BYTES"] = "0"  # the forked ranks inherit it
        try:
            finished = execute(scenario, run_dir / "runs", console=Console(file=io.StringIO()))
        finally:
            if system == "ipc-sockets":
                os.environ.pop("PLAYGROUND_IPC_RING_MIN_BYTES")
                if saved is not None:
                    os.environ["PLAYGROUND_IPC_RING_MIN_BYTES"] = saved
        if finished.code == EXIT_INTERRUPTED:
            raise KeyboardInterrupt  # Ctrl-C stopped the ranks: the command says "interrupted", exits 130
        if finished.code != 0:
            failures = "; ".join(finished.result["failures"])
            raise ScenarioError(f"ours over {system} with {n} ranks failed: {failures}")
        rows = finished.result["rows"]
    best: dict[str, dict] = {}
    for prefix, form in FORMS:
        for r in rows:
            size, t = r["size"], r.get(prefix + "time_us")
            if t is not None and (size not in best.get(form, {}) or t < best[form][size]["time_us"]):
                keep = {"time_us": t, "busbw_gbps": r[prefix + "busbw_gbps"], "wrong": r[prefix + "wrong"]}
                best.setdefault(form, {})[size] = {**keep, "algorithm": r["algorithm"]}
    return best
