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
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from playground.collectives.bench_report import FORMS
from playground.commands.benchtable_render import BASELINES, LABELS, TIME_BELOW_BYTES, render
from playground.commands.copybw import copy_rates
from playground.core import flags
from playground.core.errors import ScenarioError
from playground.core.flags import Text
from playground.core.machine import usable_cores

# (timed iterations, warm-up) of the sizes shown as times and of the others. A microsecond call
# timed 10 times right after start measures its warm-up (memos filled, pages touched: an 8-byte
# shm all-reduce 11-13 us at 10 after 3, 4.3-4.9 at 100 after 20); OSU's latency tests time 1000
# after 200 for the same reason. 100 keeps MPICH's 48 ms calls at 8 oversubscribed ranks bearable.
COUNTS = {"time": (100, 20), "busbw": (10, 3)}
COPY_PASSES = 10  # best of 10 copies per size and round: about a second at 16 and 64 MiB
SYSTEMS = tuple(LABELS)
DEFAULT_SIZES = "8,4KiB,1MiB,16MiB,64MiB"


@dataclass(frozen=True)
class TableConfig:
    """`bench table`: which systems, rank counts and sizes, how many rounds and iterations."""

    sizes: tuple[int, ...]
    rank_counts: tuple[int, ...]
    systems: tuple[str, ...]
    algorithms: str  # comma list, as the `bench` scenario's params.algorithm takes it
    rounds: int
    iters: int | None  # None: per size, benchtable.COUNTS
    warmup: int | None
    timeout_s: float
    out: Path
    command: str  # the command line as a reader types it (without --out), for the table's page

    @classmethod
    def from_flags(
        cls,
        *,
        sizes: Text = DEFAULT_SIZES,
        step: int = 2,
        algo: Text = "ring,tree,hd,rd",
        iters: int | None = None,
        warmup: int | None = None,
        timeout: float = 60.0,
        rounds: int = 3,
        rank_counts: Text = "2,4,8",
        systems: Text = "ipc,shm,gloo,mpi",
        out: str | Path = "runs",
    ) -> "TableConfig":
        given = {k: v for k, v in locals().items() if k != "cls"}  # the flags, for the command line
        command = "bench table"
        rounds = flags.integer(command, "--rounds", rounds)
        if rounds < 1:
            raise ScenarioError(f"--rounds: at least 1, got {rounds}")
        chosen = flags.items(systems)
        for s in chosen:
            if s not in SYSTEMS:
                raise ScenarioError(f"--systems {s!r}: allowed: {', '.join(SYSTEMS)}")
        return cls(
            sizes=flags.sizes("--sizes", sizes, flags.integer(command, "--step", step)),
            rank_counts=flags.integers("--rank-counts", rank_counts),
            systems=chosen,
            algorithms=flags.comma(algo) or "",
            rounds=rounds,
            iters=None if iters is None else flags.integer(command, "--iters/-i", iters),
            warmup=None if warmup is None else flags.integer(command, "--warmup/-w", warmup),
            timeout_s=flags.number(command, "--timeout", timeout),
            out=Path(out),
            command=flags.typed(command, given, cls.from_flags, omit=("out",)),
        )


def run_table(config: TableConfig) -> int:
    """Every round, rank count and system measured; the table printed and written (table.md and
    table.json); 1 if any figure came with wrong elements."""
    from playground.core.rundir import make_run_dir

    counts = {  # --iters / --warmup given: for every size
        kind: (config.iters or iters, warmup if config.warmup is None else config.warmup)
        for kind, (iters, warmup) in COUNTS.items()
    }
    err = Console(stderr=True, highlight=False)
    systems = _available(list(config.systems), err)
    run_dir = make_run_dir(config.out, "table")
    loads = [os.getloadavg()[0]]
    t_start = time.monotonic()
    runs, copies = _rounds(config, systems, counts, run_dir, loads, err)
    loads.append(os.getloadavg()[0])
    sizes, rank_counts = list(config.sizes), list(config.rank_counts)
    text = render(runs, sizes, rank_counts, systems, config.rounds, config.command, loads, counts, copies)
    print(text)
    (run_dir / "table.md").write_text(text)
    record = {"command": config.command, "loads": loads, "counts": counts, "runs": runs, "copies": copies}
    (run_dir / "table.json").write_text(json.dumps({**record, "elapsed_s": time.monotonic() - t_start}))
    print(f"\nwritten: {run_dir / 'table.md'}")
    wrong = [b for r in runs for rows in r["best"].values() for b in rows.values() if b["wrong"] > 0]
    return 1 if wrong else 0


def _rounds(
    config: TableConfig, systems: list[str], counts: dict, run_dir: Path, loads: list[float], err: Console
) -> tuple[list[dict], list[dict]]:
    """(one record per round, rank count and system: its best row per form and size; one record per
    round and busbw size: the copy rates). The systems' order alternates from round to round."""
    groups = [
        (group, counts[kind])
        for kind, group in (
            ("time", [s for s in config.sizes if s < TIME_BELOW_BYTES]),
            ("busbw", [s for s in config.sizes if s >= TIME_BELOW_BYTES]),
        )
        if group
    ]
    runs: list[dict] = []
    copies: list[dict] = []
    bw_sizes = [s for s in config.sizes if s >= TIME_BELOW_BYTES] if "shm" in systems else []
    for rnd in range(config.rounds):
        order = systems if rnd % 2 == 0 else systems[::-1]
        for size in bw_sizes:
            one, all_ = copy_rates(size, COPY_PASSES)
            copies.append(
                {"round": rnd, "size": size, "one_core": one, "all_cores": all_, "cores": usable_cores()}
            )
        for n in config.rank_counts:
            for system in order:
                loads.append(os.getloadavg()[0])
                t0 = time.monotonic()
                best: dict[str, dict] = {}
                for group, (iters, warmup) in groups:
                    measured = _measure(
                        system, n, group, config.algorithms, iters, warmup, config.timeout_s, run_dir
                    )
                    for form, rows in measured.items():
                        best.setdefault(form, {}).update(rows)
                runs.append({"round": rnd, "ranks": n, "system": system, "load": loads[-1], "best": best})
                err.print(
                    f"round {rnd + 1}/{config.rounds}, {n} ranks, {LABELS[system]}: "
                    f"{time.monotonic() - t0:.1f} s (load {loads[-1]:.2f})"
                )
    return runs, copies


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
