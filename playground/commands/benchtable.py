"""`python -m playground bench table`: the README's performance table, regenerated in one command.

For each rank count and round it runs the same all-reduce (float32 sum, in place, the best of
`--algo` per size) four ways, one after the other and never at once: ours over ZeroMQ (ipc, the
default path), ours over shared memory (shm), torch.distributed's Gloo and MPICH through mpi4py.
The order of the four alternates from round to round, so a machine that gets busier or quieter
during the run does not favour one of them. Each run gives, per size, the slowest rank's median
over its timed iterations (what `bench` prints: 100 after 20 warm-up for the sizes shown as times,
10 after 3 for the others, or `--iters`/`--warmup` for all); the table shows, per row, the median
over the rounds with the min-max beside it, and speed ratios of the medians.

Small sizes (below 1 MiB) are shown as times, larger ones as busbw, as the README does. The table
goes to stdout and `table.md` (with `table.json`: every round's numbers) in a run directory.

With shm among the systems, each round also measures the machine's copy rate at every busbw size
(`bench copy`'s, best of 10) and the busbw table gives the ring's copy bound (copybw.bound_ms) and
ours over shm as a share of it, round by round, at two rates: the size's own ("cached") and the
largest size's ("memory"). The host's speed moves the bound and ours together, so the share holds
where either alone swings by tens of percent between runs.
A machine that is busy while it runs gives other numbers: the header says the CPU, the core count
and the load average before, during (max) and after.
"""

import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console

from playground.commands.copybw import bound_ms, copy_rates
from playground.core.errors import ScenarioError
from playground.core.machine import cpu_model, usable_cores
from playground.core.sizes import format_size, parse_size_range

SYSTEMS = ("ipc", "shm", "gloo", "mpi", "ipc-sockets")
DEFAULT_SYSTEMS = "ipc,shm,gloo,mpi"
LABELS = {
    "ipc": "ours, ZeroMQ",
    "shm": "ours, shm",
    "gloo": "Gloo",
    "mpi": "MPICH",
    "ipc-sockets": "ours, ZeroMQ, bytes in sockets",  # PLAYGROUND_IPC_RING_MIN_BYTES=0: no rings
}
DEFAULT_SIZES = "8,4KiB,1MiB,16MiB,64MiB"
DEFAULT_RANKS = "2,4,8"
TIME_BELOW_BYTES = 1 << 20  # smaller sizes are shown as times (latency), larger ones as busbw
# (timed iterations, warm-up) of the sizes shown as times and of the others. A microsecond call
# timed 10 times right after start measures its warm-up (memos filled, pages touched: an 8-byte
# shm all-reduce 11-13 us at 10 after 3, 4.3-4.9 at 100 after 20); OSU's latency tests time 1000
# after 200 for the same reason. 100 keeps MPICH's 48 ms calls at 8 oversubscribed ranks bearable.
COUNTS = {"time": (100, 20), "busbw": (10, 3)}
COPY_PASSES = 10  # best of 10 copies per size and round: about a second at 16 and 64 MiB
RATIOS = (("ipc", "gloo"), ("ipc-sockets", "gloo"), ("shm", "gloo"), ("shm", "mpi"))  # speed ratios shown


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
    runs: list[dict] = []  # one record per (round, ranks, system): its best row per size
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
                best = {}
                for group, (iters, warmup) in groups:
                    best |= _measure(system, n, group, algos, iters, warmup, args.timeout, run_dir)
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
    wrong = [r for r in runs for b in r["best"].values() if b["wrong"] > 0]
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
        missing = available(s) if s in ("gloo", "mpi") else None
        if missing:
            err.print(f"{LABELS[s]} left out: {missing}")
        else:
            out.append(s)
    return out


def _measure(
    system: str, n: int, sizes: list[int], algos: str, iters: int, warmup: int, timeout_s: float, run_dir
) -> dict:
    """{size: {"time_us", "busbw_gbps", "algorithm", "wrong"}}: the best algorithm's row per size."""
    if system in ("gloo", "mpi"):
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
            "params.inplace_only=true",
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
    best: dict = {}
    for r in rows:
        size = r["size"]
        if size not in best or r["time_us"] < best[size]["time_us"]:
            keep = ("time_us", "busbw_gbps", "algorithm", "wrong")
            best[size] = {k: r[k] for k in keep}
    return best


def render(runs, sizes, rank_counts, systems, rounds, command, loads, counts: dict, copies=()) -> str:
    """The markdown: a header (command, machine, load), a time table and a busbw table; `counts`
    the (iterations, warm-up) of each ("time", "busbw"); `copies` the rounds' copy rates, which add
    the bound and ours over shm as a share of it to the busbw table."""
    (t_iters, t_warmup), (b_iters, b_warmup) = counts["time"], counts["busbw"]
    each = (
        f"{t_iters} iterations after {t_warmup} warm-up"
        if counts["time"] == counts["busbw"]
        else f"{t_iters} iterations after {t_warmup} warm-up for the times, {b_iters} after {b_warmup} for busbw"
    )
    header = [
        f"All-reduce, float32 sum, in place, best of the algorithms per size; each figure the median of "
        f"{rounds} alternating round{'s' if rounds != 1 else ''} (min-max over rounds), each round the "
        f"slowest rank's median of {each}.",
        "",
        f"- command: `{command.strip()}`",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}",
        f"- load average (1 min): {loads[0]:.2f} before, {max(loads):.2f} at most during, {loads[-1]:.2f} after "
        "(it counts the benchmark's own ranks: N ranks add up to N while they run, and it decays over a minute)",
        "- `A vs B` is A's speed over B's (B's time / A's): above 1 A is faster",
    ]
    time_sizes = [s for s in sizes if s < TIME_BELOW_BYTES]
    bw_sizes = [s for s in sizes if s >= TIME_BELOW_BYTES]
    parts = ["\n".join(header)]
    if time_sizes:
        parts.append(_table("Time (us), small messages", runs, time_sizes, rank_counts, systems, "time"))
    if bw_sizes:
        parts.append(
            _table("busbw (GB/s), large messages", runs, bw_sizes, rank_counts, systems, "busbw", copies)
        )
        if copies:
            parts.append(
                "The bound: the ring over shm's memory passes, (7N-5)/N x S per rank, at the copy rate "
                "measured in the same round (`bench copy`, best of numpy's and C's, min(N, cores) cores): "
                "cached, the rate at this size (a core copying its own buffers keeps some in its caches, "
                "which an all-reduce moving bytes between cores cannot); memory, the rate at the largest "
                "size, beyond every cache. The share is the bound over ours over shm (best algorithm), round "
                "by round, median [min-max]."
            )
    return "\n\n".join(parts) + "\n"


def _table(title, runs, sizes, rank_counts, systems, kind, copies=()) -> str:
    ratios = [(a, b) for a, b in RATIOS if a in systems and b in systems]
    head = [
        "ranks",
        "size",
        *(LABELS[s] for s in systems),
        *(f"{LABELS[a]} vs {LABELS[b]}" for a, b in ratios),
        *(
            ("bound (ms), cached / memory", f"{LABELS['shm']}, share of the bound, cached / memory")
            if copies
            else ()
        ),
    ]
    lines = [f"{title}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in rank_counts:
        for size in sizes:
            cells, medians = [str(n), format_size(size)], {}
            for s in systems:
                got = [
                    r["best"][size]
                    for r in runs
                    if r["ranks"] == n and r["system"] == s and size in r["best"]
                ]
                if not got:
                    cells.append("-")
                    continue
                times = [g["time_us"] for g in got]
                medians[s] = statistics.median(times)
                algo = _most_common([g["algorithm"] for g in got]) if s not in ("gloo", "mpi") else ""
                cells.append(_cell(times, size, n, kind, algo))
            for a, b in ratios:
                ok = a in medians and b in medians and medians[a] > 0
                cells.append(f"{medians[b] / medians[a]:.2f}x" if ok else "-")
            if copies:
                cells += _bound_cells(runs, copies, n, size)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bound_cells(runs, copies, n: int, size: int) -> list[str]:
    """[the bound's median ms, ours over shm's share of it: median [min-max]], round by round, each
    at two copy rates: this size's ("cached": a core copying its own buffers of the size keeps
    some of them in its caches, which an all-reduce moving the bytes between cores cannot) and the
    largest size's ("memory": beyond every cache)."""
    largest = max(c["size"] for c in copies)
    cells = [[], []]  # [bounds, shares], one entry per rate
    for rate_size in (size, largest):
        bounds, shares = [], []
        for c in copies:
            if c["size"] != rate_size:
                continue
            ms = bound_ms(n, size, c["one_core"], c["all_cores"], c["cores"])
            bounds.append(ms)
            ours = [
                r["best"][size]["time_us"]
                for r in runs
                if r["round"] == c["round"] and r["ranks"] == n and r["system"] == "shm" and size in r["best"]
            ]
            shares += [ms * 1e3 / t for t in ours if t > 0]
        if not bounds or not shares:
            return ["-", "-"]
        cells[0].append(f"{statistics.median(bounds):.2f}")
        cells[1].append(f"{statistics.median(shares):.0%} [{min(shares):.0%}-{max(shares):.0%}]")
    return [" / ".join(c) for c in cells]


def _cell(times: list[float], size: int, n: int, kind: str, algo: str) -> str:
    suffix = f" ({algo})" if algo else ""
    if kind == "time":
        lo, mid, hi = min(times), statistics.median(times), max(times)
        return f"{_num(mid)}{suffix} [{_num(lo)}-{_num(hi)}]"
    factor = 2 * (n - 1) / n
    bws = sorted(size / t / 1e3 * factor for t in times)
    return f"{statistics.median(bws):.2f}{suffix} [{bws[0]:.2f}-{bws[-1]:.2f}]"


def _num(us: float) -> str:
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def _most_common(values: list[str]) -> str:
    return max(values, key=values.count) if values else ""  # ties: the first round's
