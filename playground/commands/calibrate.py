"""`python -m playground calibrate`: measure what the models and the simulator need, once, into one file.

What it measures (about two and a half minutes here; buffers of at most 64 MiB, 16 MiB messages; at its peak,
8 ranks ping-ponging 16 MiB, all its processes' proportional set sizes add up to about 0.9 GiB, most
of it the rings' pages):
1. the machine: numpy's copy and add at buffer sizes from 64 KiB to 64 MiB (`DEFAULT_COPY_SIZES`), on
   one core and on all cores at once (the copy rate by footprint, how concurrent copies share the
   memory, gamma), the scheduler's time slice and its migration cost, read from the kernel where it
   lets us, else its default (commands/hostbench.py), and the communicator's Python a data-free
   simulation times per message (sim/replay.py);
2. per transport (ipc and shm by default; tcp on request): every pair of ranks ping-pongs, ping-pings
   and exchanges windows of messages at once (nodes/calibrate.py) at 2 ranks (the textbook
   ping-pong: a message's cost on an idle machine) and at 2 and 4 times as many ranks as cores (what
   a message costs when ranks wait for cores: wake-ups, hand-offs, the CPU every thread spends per
   message, the context switches), and times a small numpy call right after each message (the caches
   another rank left) and, up to 1 MiB, the ping-ping while every rank's other thread computes (what a
   training rank's collectives pay beside backward); each launched `--rounds` times (5) in alternating order, the median of each
   figure kept (`median_patterns`); the rates too are measured `--rounds` times and averaged
   (`mean_rates`).
Everything measured goes raw into one JSON file (default ./calibration.json, or PLAYGROUND_CALIBRATION)
with the machine and the version that measured it; models/hostfit.py derives the costs from it
when it is read, and `bench`, `run`'s collective tables, `simulate --link FILE` and the lecture's
model column read it (models/calibration.py). The sizes measured leave gaps on purpose (no 256 KiB, no
4 MiB; 2, 4 and 8 ranks on 2 cores, not 3, 5 or 6): `results --sections simulator` judges the model on
rows it was not calibrated on.
"""

import argparse
import io
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from playground.comm.mailbox import spin_policy
from playground.comm.registry import LAUNCHED
from playground.comm.shm_transport import streams_from_bytes
from playground.core import flags
from playground.core.errors import ScenarioError
from playground.core.flags import Text
from playground.core.machine import usable_cores
from playground.core.rundir import EXIT_OK
from playground.core.sizes import format_size
from playground.core.version import VERSION
from playground.display.report import Table, make_console, render_table
from playground.models.calibration import FORMAT, default_path, read_calibration, this_machine

DEFAULT_SIZES = "64,1KiB,4KiB,16KiB,64KiB,128KiB,1MiB,16MiB"
# Doubling, so that the caches' edges fall between neighbours, but for 32 MiB: there, at the edge of
# the last-level cache's share, a copy looping over one buffer runs now at the cache's rate and now at
# memory's (7-15 GB/s from one process to the next, all of a calibration's rounds alike for half an
# hour), while collectives, whose buffers are reused at many distances, slow down gradually across
# it: the line from 16 to 64 MiB prices them (measured over five calibrations with their benches).
DEFAULT_COPY_SIZES = "64KiB,128KiB,256KiB,512KiB,1MiB,2MiB,4MiB,8MiB,16MiB,64MiB"
MAX_RANKS = 64
# Where each transport's path changes (models/piecewise.py fits a line per range): ipc sends arrays
# from 64 KiB through shared-memory rings (comm/zmq_transport.py); shm sends an array inline in a
# mailbox slot, and one a slot's record cannot hold (streams_from_bytes) through the rings.
BOUNDS = {"ipc": [0, 64 << 10], "shm": [0, streams_from_bytes()], "tcp": [0, 64 << 10]}
SEGMENT_BYTES = {"ipc": 4 << 20, "shm": 4 << 20, "tcp": 1 << 20}  # the collectives' default segments
# Five: two calibrations of three launches each, minutes apart, priced the same benches 1673 and 1760 of
# 5 x 392 rows within 25%; two of five launches each, 1730 and 1743 (crowded ranks' placement draws).
DEFAULT_ROUNDS = 5
MEDIAN_KEYS = ("time_s", "mean_s", "cpu_s", "main_cpu_s", "hot_s")


HELP = "measure this machine once for every model and the simulator (writes calibration.json)"
DESCRIPTION = (
    "Copy and reduction rates, the scheduler's time slice, and per transport a ping-pong, a ping-ping and "
    "windows of messages of every pair of ranks at once at 2 ranks and at more ranks than cores, and the "
    "ping-ping beside compute; one JSON file that bench, run, simulate --link and the lecture read."
)


def add_calibrate_flags(c: argparse.ArgumentParser) -> None:
    """`calibrate`'s flags; their defaults are `CalibrateConfig.from_flags`'s."""
    c.add_argument("--transports", help="comma list of ipc, shm, tcp (default ipc,shm)")
    c.add_argument("--sizes", help=f"ping-pong message sizes (default {DEFAULT_SIZES})")
    c.add_argument("--copy-sizes", help=f"copy buffer sizes (default {DEFAULT_COPY_SIZES})")
    c.add_argument("--ranks", help="rank counts measured (default 2, 2x and 4x the cores, at most 64)")
    c.add_argument("--budget", type=float, help="seconds per size and pattern (default 0.4)")
    c.add_argument(
        "--rounds",
        type=int,
        help=f"launches of each ping-pong, in alternating order; the median is kept (default {DEFAULT_ROUNDS})",
    )
    c.add_argument("--iters", type=int, help="copies timed per size and process count (default 10)")
    c.add_argument("--out", help=f"the file written (default {default_path()})")
    c.add_argument("--work", help="directory for the ping-pong runs (default runs)")


@dataclass(frozen=True)
class CalibrateConfig:
    """What `calibrate` measures (see the module) and where it writes it."""

    transports: tuple[str, ...]
    sizes: tuple[int, ...]  # ping-pong message sizes
    copy_sizes: tuple[int, ...]
    rank_counts: tuple[int, ...]
    budget_s: float  # per size and pattern
    rounds: int
    iters: int  # copies timed per size and process count
    out: Path  # the calibration file
    work: Path  # the ping-pong runs
    command: str  # the command line, for the record

    @classmethod
    def from_flags(
        cls,
        *,
        transports: Text = "ipc,shm",
        sizes: Text = DEFAULT_SIZES,
        copy_sizes: Text = DEFAULT_COPY_SIZES,
        ranks: Text | None = None,
        budget: float = 0.4,
        rounds: int = DEFAULT_ROUNDS,
        iters: int = 10,
        out: str | Path | None = None,
        work: str | Path = "runs",
    ) -> "CalibrateConfig":
        given = {k: v for k, v in locals().items() if k != "cls"}  # the flags, for the command line
        chosen = flags.items(transports)
        for t in chosen:
            if t not in LAUNCHED or t not in BOUNDS:
                raise ScenarioError(f"--transports {t!r}: allowed: {', '.join(BOUNDS)}")
        measured = {
            flag: _sizes(flag, text) for flag, text in (("--sizes", sizes), ("--copy-sizes", copy_sizes))
        }
        if not budget > 0:
            raise ScenarioError(f"--budget {budget}: expected seconds > 0")
        if iters < 1:
            raise ScenarioError(f"--iters {iters}: expected at least 1")
        if rounds < 1:
            raise ScenarioError(f"--rounds {rounds}: expected at least 1")
        return cls(
            transports=chosen,
            sizes=measured["--sizes"],
            copy_sizes=measured["--copy-sizes"],
            rank_counts=_rank_counts(flags.comma(ranks), usable_cores()),
            budget_s=budget,
            rounds=rounds,
            iters=iters,
            out=Path(out) if out else default_path(),
            work=Path(work),
            command=flags.typed("calibrate", given, cls.from_flags),
        )


def _sizes(flag: str, text: Text) -> tuple[int, ...]:
    sizes = flags.sizes(flag, text)
    if len(set(sizes)) < 2 or min(sizes) < 1:
        raise ScenarioError(f"{flag} {flags.comma(text)!r}: give at least two distinct sizes >= 1 byte")
    return sizes


def waits_asleep(transport: str, ranks: int, cores: int) -> bool:
    """Does a rank of `transport` waiting for a message sleep (and need waking) at this rank count?
    ZeroMQ's wait is a poll that sleeps; the shm transport spins while ranks do not outnumber cores,
    polls yielding the core up to twice as many, and sleeps beyond (comm/mailbox.py's spin_policy)."""
    if transport != "shm":
        return True
    pause_ns, yield_ns = spin_policy(ranks, cores)
    return not pause_ns and not yield_ns


def _rank_counts(text: str | None, cores: int) -> tuple[int, ...]:
    if text is None:
        return tuple(sorted({2, *(min(MAX_RANKS, k * cores) for k in (2, 4))}))
    try:
        counts = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        counts = []
    if not counts or any(n < 2 or n % 2 or n > MAX_RANKS for n in counts) or counts[0] != 2:
        raise ScenarioError(
            f"--ranks {text!r}: expected even rank counts from 2 to {MAX_RANKS}, starting at 2"
        )
    return tuple(counts)


def _pingpongs(transport: str, ranks: int, sizes: list[int], budget_s: float, work: Path) -> list[dict]:
    from playground.config.scenario import load_scenario
    from playground.launcher.run import EXIT_INTERRUPTED, execute

    sets = [f"params.sizes=[{','.join(map(str, sizes))}]", f"params.budget_s={budget_s}"]
    scenario = load_scenario("calibrate", ranks=ranks, transport=transport, overrides=sets)
    finished = execute(scenario, work, console=Console(file=io.StringIO()))
    if finished.code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt  # Ctrl-C stopped the ranks: the command says "interrupted", exits 130
    if finished.code != EXIT_OK:
        raise ScenarioError(
            f"calibrate: the {transport} ping-pong on {ranks} ranks failed; see {finished.result.get('run_dir')}"
        )
    return finished.result["patterns"]


def measure(config: CalibrateConfig, console: Console) -> dict:
    """Everything `calibrate` measures, as the record it writes (see the module)."""
    started = time.time()
    record = {
        "format": FORMAT,
        "version": VERSION,
        "machine": this_machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": config.command,
        "host": _host(config),
        "transports": _transports(config, console),
    }
    record["elapsed_s"] = time.time() - started
    return record


def _host(config: CalibrateConfig) -> dict:
    """The machine: copy and add rates by size (the rounds' mean), the time slice, wake-up, migration,
    and the communicator's Python a data-free simulation times per message (sim/replay.py)."""
    from playground.commands.hostbench import migration_cost_s, rate_curve, time_slice_s, wake_up_s
    from playground.display.report import progress_bar
    from playground.sim.replay import timed_python_s

    copy_sizes, cores = list(config.copy_sizes), usable_cores()
    with progress_bar(make_console(stderr=True)) as progress:
        task = progress.add_task("copy and add", total=config.rounds * len(copy_sizes))
        rates = mean_rates(
            [
                rate_curve(
                    copy_sizes,
                    cores,
                    config.iters,
                    lambda k, n, what, r=r: progress.update(task, completed=r * n + k, description=what),
                )
                for r in range(config.rounds)
            ]
        )
        progress.update(task, completed=config.rounds * len(copy_sizes), description="time slice, wake-up")
        slice_s, wake_s = time_slice_s(), wake_up_s()
        migration_s, migration_from = migration_cost_s()
        python_s = timed_python_s("window")
    return {
        "rates": rates,
        "slice_s": slice_s,
        "wake_s": wake_s,
        "migration_cost_s": migration_s,
        "migration_cost_from": migration_from,
        "timed_python_s": python_s,
    }


def _transports(config: CalibrateConfig, console: Console) -> dict:
    """Per transport, the ping-pongs of every rank count, `config.rounds` launches each in alternating
    order, the median kept (`median_patterns`)."""
    sizes, counts, cores = list(config.sizes), list(config.rank_counts), usable_cores()
    steps = [(t, n) for t in config.transports for n in counts]
    rounds: dict[tuple[str, int], list[list[dict]]] = {step: [] for step in steps}
    for r in range(config.rounds):  # alternating, as `bench` rounds are: a slow spell hits each step once
        for k, (transport, ranks) in enumerate(steps if r % 2 == 0 else steps[::-1]):
            console.print(
                f"[{r * len(steps) + k + 1}/{config.rounds * len(steps)}] {transport}: "
                f"every pair of {ranks} ranks ping-pongs",
                highlight=False,
            )
            rounds[(transport, ranks)].append(
                _pingpongs(transport, ranks, sizes, config.budget_s, config.work)
            )
    out: dict[str, dict] = {}
    for transport, ranks in steps:
        entry = out.setdefault(
            transport,
            {"bounds": BOUNDS[transport], "segment_bytes": SEGMENT_BYTES[transport], "patterns": []},
        )
        idle = rounds[(transport, min(counts))] if ranks > cores else None
        entry["patterns"] += [
            {**p, "sleeps": waits_asleep(transport, ranks, cores)}
            for p in median_patterns(rounds[(transport, ranks)], idle)
        ]
    return out


def mean_rates(rounds: list[list[dict]]) -> list[dict]:
    """The rounds' rate curves as one: each rate the harmonic mean of the rounds' (their mean time per
    byte). Near a cache's edge one process copies at the cache's rate and the next at memory's."""
    return [
        {
            key: (rows[0][key] if key == "bytes" else len(rows) / sum(1 / row[key] for row in rows))
            for key in rows[0]
        }
        for rows in zip(*rounds, strict=True)
    ]


def median_patterns(rounds: list[list[dict]], idle: list[list[dict]] | None = None) -> list[dict]:
    """One row per (pattern, size) of the rounds' rows: each time and CPU figure their median. Every
    launch places the ranks on the cores anew, and where ranks outnumber cores a pair the scheduler
    put on one core (no wake-up across cores) runs 2-4x faster than one across them, for a spell of
    sizes or a whole launch: one launch is a draw. With `idle` (the rounds at a core per rank) a row
    faster than the idle one-way time is such a spell and is left out while another round has the
    size: the simulator puts a pair's ranks on different cores (rank % cores), as a collective's
    critical path crosses them."""
    fastest: dict[tuple[str, int], float] = {}
    for rows in idle or []:
        for row in rows:
            key = (row["pattern"], row["size"])
            fastest[key] = min(fastest.get(key, math.inf), row["time_s"])
    by: dict[tuple[str, int], list[dict]] = {}
    for rows in rounds:
        for row in rows:
            by.setdefault((row["pattern"], row["size"]), []).append(row)
    out = []
    for key, same in by.items():
        crossing = [row for row in same if row["time_s"] >= fastest.get(key, 0.0)] or same
        out.append(
            {
                **same[0],
                **{k: statistics.median(row[k] for row in crossing) for k in MEDIAN_KEYS if k in same[0]},
                "rounds": len(same),
            }
        )
    return out


def summary_table(calibration) -> Table:
    """Per transport and rank count measured: a message's one-way time and CPU, small and large."""
    rows = []
    for transport, entry in calibration.record["transports"].items():
        mean = {(p["pattern"], p["ranks"], p["size"]): p.get("mean_s") for p in entry["patterns"]}
        for p in sorted(entry["patterns"], key=lambda p: (p["ranks"], p["size"])):
            if p["pattern"] != "pingpong":
                continue
            idle, beside = (mean.get((k, p["ranks"], p["size"])) for k in ("pingping", "behind_compute"))
            rows.append(
                {
                    "transport": transport,
                    "ranks": p["ranks"],
                    "size": format_size(p["size"]),
                    "one_way_us": p["time_s"] * 1e6,
                    "cpu_us": p["cpu_s"] * 1e6,
                    "beside": f"{beside / idle:.1f}" + ("" if p.get("sleeps", True) else " (spins)")
                    if idle and beside
                    else "-",
                }
            )
    return Table(
        "ping-pong of every pair at once: one way, and CPU per message (all threads of all ranks); beside "
        "compute: the ping-ping's mean while every rank's other thread computes, over its idle mean",
        rows,
        {
            "transport": "transport",
            "ranks": "ranks",
            "size": "size",
            "one_way_us": "one way (us)",
            "cpu_us": "CPU (us)",
            "beside": "beside compute (x)",
        },
    )


def run_calibrate(config: CalibrateConfig) -> int:
    console = make_console()
    out = config.out
    record = measure(config, console)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(out)
    calibration = read_calibration(out)
    render_table(summary_table(calibration), console)
    host = record["host"]
    largest = max(host["rates"], key=lambda r: r["bytes"])
    console.print(
        f"time slice {host['slice_s'] * 1e3:.2f} ms; migration cost {host['migration_cost_s'] * 1e3:.2f} ms "
        f"({host['migration_cost_from']}); copy at {format_size(largest['bytes'])}: "
        f"{largest['copy_one_gbps']:.1f} GB/s one core, {largest['copy_all_gbps']:.1f} all; "
        f"add {largest['add_one_gbps']:.1f} GB/s",
        highlight=False,
    )
    for t in calibration.transports:
        console.print(f"{t}: {calibration.link(t).describe()}", highlight=False)
    console.print(f"calibration: {out} ({record['elapsed_s']:.0f} s)", highlight=False)
    return EXIT_OK
