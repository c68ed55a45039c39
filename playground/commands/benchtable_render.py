"""The markdown of `bench table`: a header, then per form (in place, out of place) a time table for
small messages and a busbw table for large ones, each figure the median over rounds with its range.

Like against like: every figure in a table is of that table's form, and every speed ratio divides
two figures of the same form and size (`ratio`). A system that does not offer a form (torch's
all_reduce has no out-of-place one) has no column in that form's tables. With copy rates measured
in the rounds, the busbw tables add the physical bound (copybw.bound_ms: every rank's buffer read
once and written once, at the best rate measured at that size) and ours over shm as a share of it.
"""

import os
import platform
import statistics

from playground.commands.copybw import bound_ms
from playground.core.machine import cpu_model
from playground.core.sizes import format_size

LABELS = {
    "ipc": "ours, ZeroMQ",
    "shm": "ours, shm",
    "gloo": "Gloo",
    "mpi": "MPICH",
    "ipc-sockets": "ours, ZeroMQ, bytes in sockets",  # PLAYGROUND_IPC_RING_MIN_BYTES=0: no rings
}
BASELINES = ("gloo", "mpi")
TIME_BELOW_BYTES = 1 << 20  # smaller sizes are shown as times (latency), larger ones as busbw
RATIOS = (("ipc", "gloo"), ("ipc-sockets", "gloo"), ("shm", "gloo"), ("shm", "mpi"))  # speed ratios shown
FORMS = ("in place", "out of place")  # the keys of a run's "best", in the order the tables come


def figures(runs: list[dict], form: str, system: str, n: int, size: int) -> list[dict]:
    """Every round's best row of `system` at `n` ranks and `size`, in `form`."""
    return [
        r["best"][form][size]
        for r in runs
        if r["ranks"] == n and r["system"] == system and size in r["best"].get(form, {})
    ]


def ratio(runs: list[dict], form: str, a: str, b: str, n: int, size: int) -> float | None:
    """A's speed over B's (B's median time / A's) in one form: both medians are of that form."""
    ta = [g["time_us"] for g in figures(runs, form, a, n, size)]
    tb = [g["time_us"] for g in figures(runs, form, b, n, size)]
    if not ta or not tb or statistics.median(ta) <= 0:
        return None
    return statistics.median(tb) / statistics.median(ta)


def render(runs, sizes, rank_counts, systems, rounds, command, loads, counts: dict, copies=()) -> str:
    """The markdown: a header (command, machine, load), then for each form a time table and a busbw
    table; `counts` the (iterations, warm-up) of each ("time", "busbw"); `copies` the rounds' copy
    rates, which add the bound and ours over shm as a share of it to the busbw tables."""
    (t_iters, t_warmup), (b_iters, b_warmup) = counts["time"], counts["busbw"]
    each = (
        f"{t_iters} iterations after {t_warmup} warm-up"
        if counts["time"] == counts["busbw"]
        else f"{t_iters} iterations after {t_warmup} warm-up for the times, {b_iters} after {b_warmup} for busbw"
    )
    header = [
        "All-reduce, float32 sum, in place and out of place (nccl-tests' two forms), each table one form "
        "and every ratio between figures of that form; best of the algorithms per size; each figure the "
        f"median of {rounds} alternating round{'s' if rounds != 1 else ''} (min-max over rounds), each "
        f"round the slowest rank's median of {each}.",
        "",
        f"- command: `{command.strip()}`",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}",
        f"- load average (1 min): {loads[0]:.2f} before, {max(loads):.2f} at most during, {loads[-1]:.2f} after "
        "(it counts the benchmark's own ranks: N ranks add up to N while they run, and it decays over a minute)",
        "- `A vs B` is A's speed over B's (B's time / A's): above 1 A is faster",
        "- in place: the result overwrites the input (MPI_IN_PLACE; torch's all_reduce, the form PyTorch DDP "
        "uses); out of place: into a separate buffer (torch's all_reduce has no such form: Gloo is left out)",
    ]
    time_sizes = [s for s in sizes if s < TIME_BELOW_BYTES]
    bw_sizes = [s for s in sizes if s >= TIME_BELOW_BYTES]
    parts = ["\n".join(header)]
    for form in FORMS:
        shown = [
            s for s in systems if any(form in r["best"] and r["best"][form] for r in runs if r["system"] == s)
        ]
        if time_sizes:
            title = f"Time (us), small messages, {form}"
            parts.append(_table(title, runs, form, time_sizes, rank_counts, shown, "time"))
        if bw_sizes:
            title = f"busbw (GB/s), large messages, {form}"
            parts.append(_table(title, runs, form, bw_sizes, rank_counts, shown, "busbw", copies))
    if bw_sizes and copies:
        parts.append(
            "The bound: the fewest memory passes any all-reduce makes, every rank's buffer read once and its "
            "result written once (2 S per rank), at the best copy rate measured at that size over the rounds "
            "(`bench copy`, best of numpy's and C's, min(N, cores) cores). No path beats it, so the share "
            "(the bound over ours over shm, round by round, median [min-max]) stays at or below 100%."
        )
    return "\n\n".join(parts) + "\n"


def _table(title, runs, form, sizes, rank_counts, systems, kind, copies=()) -> str:
    ratios = [(a, b) for a, b in RATIOS if a in systems and b in systems]
    share = bool(copies) and "shm" in systems
    head = [
        "ranks",
        "size",
        *(LABELS[s] for s in systems),
        *(f"{LABELS[a]} vs {LABELS[b]}" for a, b in ratios),
        *(("bound (ms)", f"{LABELS['shm']}, share of the bound") if share else ()),
    ]
    lines = [f"{title}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in rank_counts:
        for size in sizes:
            cells = [str(n), format_size(size)]
            for s in systems:
                got = figures(runs, form, s, n, size)
                if not got:
                    cells.append("-")
                    continue
                algo = _most_common([g["algorithm"] for g in got]) if s not in BASELINES else ""
                cells.append(_cell([g["time_us"] for g in got], size, n, kind, algo))
            for a, b in ratios:
                x = ratio(runs, form, a, b, n, size)
                cells.append(f"{x:.2f}x" if x is not None else "-")
            if share:
                cells += _bound_cells(runs, form, copies, n, size)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bound_cells(runs, form, copies, n: int, size: int) -> list[str]:
    """[the bound's ms, ours over shm's share of it: median [min-max] over rounds]. The rate is the
    best measured at this size in any round: a round whose copies ran slow does not lower the bar."""
    rates = [c for c in copies if c["size"] == size]
    ours = [g["time_us"] for g in figures(runs, form, "shm", n, size) if g["time_us"] > 0]
    if not rates or not ours:
        return ["-", "-"]
    best = max(rates, key=lambda c: c["all_cores"])
    one = max(c["one_core"] for c in rates)
    ms = bound_ms(n, size, one, best["all_cores"], best["cores"])
    shares = [ms * 1e3 / t for t in ours]
    return [f"{ms:.2f}", f"{statistics.median(shares):.0%} [{min(shares):.0%}-{max(shares):.0%}]"]


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
