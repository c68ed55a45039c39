"""`python -m playground simulate COLLECTIVE ...`: the real algorithms on a simulated cluster.

For every (ranks, algorithm, size) it runs the collective's own code on simulated ranks
(driver.py) and prints bench's nccl-tests table with the model's time and sim/model beside each
row; `--crossover` adds where the ring overtakes the tree, halving-doubling and recursive
doubling (the pairwise all-to-all exchange Bruck's), as a table and crossover.png. It writes a run
directory as `run` does: simulation.yaml, result.json with bench's row keys, and with one rank count
each rank's rank-<r>.jsonl stamped in virtual microseconds (per message up to 64 ranks), which
`inspect` reads.
"""

import argparse
import json
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import Progress

from playground.collectives import ALGORITHMS
from playground.collectives.bench_report import COLUMNS, LEGEND, with_model_columns, wrong_row_failures
from playground.core.errors import ScenarioError
from playground.core.rundir import EXIT_FAILED, EXIT_OK, Finished, make_run_dir, write_result
from playground.core.sizes import format_size
from playground.display.notebook import NotebookProgress
from playground.display.report import Report, Table, make_console, progress_bar, render_report
from playground.sim import model
from playground.sim.driver import DATA_MAX_RANKS, simulate, wants_data
from playground.sim.options import CALIBRATED, DTYPES, OPS, SimSpec, SimulateConfig

TRACE_MESSAGES_MAX_RANKS = 64


HELP = "run the collectives on a simulated cluster (virtual time, up to thousands of ranks)"
DESCRIPTION = (
    "The same algorithm code as `run`/`bench`, on simulated ranks in virtual time: each rank has a "
    "full-duplex port per link kind; a message of n bytes holds the sender's and receiver's ports for "
    "n/beta and arrives alpha later; a reduction of n bytes costs n/gamma."
)


def add_simulate_flags(s: argparse.ArgumentParser) -> None:
    """`simulate`'s flags; their defaults are `SimulateConfig.from_flags`'s."""
    s.add_argument("collective", choices=list(ALGORITHMS), help="what to simulate")
    s.add_argument("--algo", help="comma list (allreduce: ring,tree,hd,rd; hier with --topology)")
    s.add_argument("--ranks", "-n", help="rank count, list (8,64) or doubling range (8..1024); default 8")
    s.add_argument("--sizes", "-s", help="'1KiB..1GiB' doubles, or a list '8,1MiB' (default 8..64MiB)")
    s.add_argument("--step", type=int, help="multiply sizes by this factor in a range (default 2)")
    s.add_argument(
        "--link",
        help="link preset for every link: ib, roce, ethernet, nvlink (default ib); or a calibration.json "
        "of `calibrate`: this machine (its cores, per-message costs, time slice, memory bandwidth)",
    )
    s.add_argument(
        "--transport",
        choices=list(CALIBRATED),
        help="which calibrated transport (default ipc); without --link, the default calibration's "
        "(./calibration.json or $PLAYGROUND_CALIBRATION, which `calibrate` writes)",
    )
    s.add_argument("--alpha", help="per-message latency, e.g. 5us (overrides the preset)")
    s.add_argument("--beta", help="bandwidth per port, e.g. 50GB/s or 100Gbit (overrides the preset)")
    s.add_argument("--gamma", help="reduction rate, e.g. 100GB/s (default: free)")
    s.add_argument("--topology", help="NODESxRANKS_PER_NODE, e.g. 128x8: two kinds of link")
    s.add_argument("--intra", help="link preset inside a node (with --topology; default nvlink)")
    s.add_argument("--inter", help="link preset between nodes (with --topology; default --link)")
    s.add_argument(
        "--cores",
        type=int,
        help="CPUs the ranks share, as on one host: a reduction needs one, a message two (copy in, copy out)",
    )
    s.add_argument("--segment", help="cut messages into segments of this many bytes (default: none)")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--data", dest="data", action="store_true", help="carry real bytes, check results")
    mode.add_argument("--no-data", dest="data", action="store_false", help="messages carry sizes only")
    s.add_argument(
        "--measured",
        action="append",
        metavar="RUN_DIR",
        help="a bench/run directory of this machine (repeatable): its times beside the simulated ones",
    )
    s.add_argument(
        "--crossover",
        action="store_true",
        help="where the ring overtakes tree, hd, rd; the pairwise all-to-all Bruck's (+ plot)",
    )
    s.add_argument(
        "--fold",
        action="store_true",
        help="one rank runs for all where the algorithm and the links make every rank's timeline the same "
        "(ring; rd, hd on a power of two); exact, data-free; the others run as usual",
    )
    s.add_argument("--dtype", "-d", choices=list(DTYPES), help="element type (default float32)")
    s.add_argument("--op", "-o", choices=list(OPS), help="reduction (default sum)")
    s.add_argument("--out", help="directory for run directories (default runs)")


def run_simulate(config: SimulateConfig) -> int:
    return simulate_sweep(config).code


def simulate_sweep(config: SimulateConfig, console: Console | None = None) -> Finished:
    """`simulate`: every point simulated, the table printed on `console`, result.json written."""
    spec = config.spec
    console, err = console or make_console(), make_console(stderr=True)
    run_dir = make_run_dir(config.out, f"simulate-{spec.collective}")
    (run_dir / "simulation.yaml").write_text(yaml.safe_dump(_describe(spec), sort_keys=False))
    console.print(
        f"[bold]simulate {spec.collective}[/bold]: {', '.join(map(str, spec.ranks))} ranks, {spec.link_source} -> {run_dir}",
        highlight=False,
    )
    trace_dir = run_dir if len(spec.ranks) == 1 else None
    stats = {"messages": 0, "events": 0, "wall_s": 0.0, "folded_run": 0}
    t0 = time.perf_counter()
    crossovers = {}
    with progress_bar(err) as progress:
        sweep = _Sweep(spec, trace_dir, stats, progress)
        if spec.crossover:  # only the points a bisection needs: a ring of 1024 ranks costs as much at 8 B
            from playground.sim.crossover import search

            crossovers = search(sweep, spec)
        else:
            progress.update(sweep.task, total=len(spec.ranks) * len(spec.algorithms) * len(spec.sizes))
            for n in spec.ranks:
                for algorithm in spec.algorithms:
                    for size in spec.sizes:
                        sweep.row(n, algorithm, size)
    rows = sweep.rows()
    stats["wall_s"] = time.perf_counter() - t0
    if config.measured:
        rows = add_measured(rows, load_measured(list(config.measured)))
    report = _report(spec, rows, stats, run_dir, crossovers)
    render_report(report, console)
    result = _result(spec, rows, report, run_dir)
    write_result(run_dir, result)
    console.print(f"logs: {run_dir}", highlight=False)
    return Finished(EXIT_OK if report.ok else EXIT_FAILED, result)


def _result(spec: SimSpec, rows: list[dict], report: Report, run_dir: Path) -> dict:
    """result.json: bench's keys, the tables and notes, and the resolved simulation."""
    return {
        "ok": report.ok,
        "scenario": f"simulate-{spec.collective}",
        "ranks": max(spec.ranks),
        "transport": "sim",
        "rows": rows,
        "tables": [t.to_dict() for t in report.tables],
        "notes": report.notes,
        "failures": report.failures,
        "files": report.files,
        "run_dir": str(run_dir),
        "simulation": _describe(spec),
        **report.data,
    }


class _Sweep:
    """The simulated points, each run once (`row`), under one progress bar that also counts the
    messages of a long simulation as it runs."""

    def __init__(self, spec: SimSpec, trace_dir, stats: dict, progress: "Progress | NotebookProgress"):
        self.spec, self.trace_dir, self.stats, self.progress = spec, trace_dir, stats, progress
        self.task = progress.add_task("simulate", total=None)
        self._rows: dict[tuple[int, str, int], dict] = {}

    def row(self, n: int, algorithm: str, size: int) -> dict:
        key = (n, algorithm, size)
        if key not in self._rows:
            what = f"{n} ranks {algorithm} {format_size(size)}"
            self.progress.update(self.task, description=what)

            def running(engine) -> None:
                self.progress.update(self.task, description=f"{what}: {engine.num_messages:,} messages")

            self._rows[key] = _point(self.spec, n, algorithm, size, self.trace_dir, self.stats, running)
            self.progress.advance(self.task)
        return self._rows[key]

    def rows(self) -> list[dict]:
        """Every simulated row, by rank count, algorithm (as given) and size."""
        order = {a: k for k, a in enumerate(self.spec.algorithms)}
        return [self._rows[k] for k in sorted(self._rows, key=lambda k: (k[0], order[k[1]], k[2]))]


def _point(spec: SimSpec, n: int, algorithm: str, size: int, trace_dir, stats: dict, running=None) -> dict:
    # data-free by default on a calibrated host: its timed Python would count real reductions twice
    data = (
        (wants_data(n, size) and not spec.fold and spec.calibration is None)
        if spec.data is None
        else spec.data
    )
    row, world = simulate(
        spec.machine(n, size),
        spec.collective,
        algorithm,
        size,
        spec.dtype,
        spec.op,
        data=data and n <= DATA_MAX_RANKS,
        segment_bytes=spec.segment_bytes,
        trace_dir=trace_dir,
        trace_messages=n <= TRACE_MESSAGES_MAX_RANKS,
        progress=running,
        fold=spec.fold,
    )
    stats["events"] += world.engine.num_events
    stats["messages"] += world.num_messages
    if world.folded:
        stats["folded_run"] += world.engine.num_messages
    row = model.with_model(spec, row, n)
    row["mode"] = "folded" if world.folded else "data" if data else "sizes"
    return row


def _report(spec: SimSpec, rows: list[dict], stats: dict, run_dir: Path, crossovers: dict) -> Report:
    failures = wrong_row_failures(rows, spec.collective, label=lambda r: f" {r['ranks']} ranks")
    title = (
        f"{spec.collective} simulated ({spec.dtype}): virtual time of the slowest rank; "
        f"model = closed form ({'slow link for all but hier' if spec.ranks_per_node else 'same links'})"
    )
    columns = {"ranks": "ranks", **with_model_columns(COLUMNS, spec.collective), "mode": "mode"}
    columns.pop("dtype")
    columns["vs_model"] = "sim/model"
    if any("measured_us" in r for r in rows):
        columns.update(MEASURED_COLUMNS)
    legend = {k: v for k, v in LEGEND.items() if k in columns and k != "vs_model"}
    legend["vs_model"] = "simulated time / the closed form's"
    legend["mode"] = (
        "how the row was run: data (real arrays, checked), sizes (message sizes only, no data), "
        "folded (one rank ran for all, their timelines being identical)"
    )
    if "vs_measured" in columns:
        legend["vs_measured"] = "simulated time / the measured one (--measured)"
    tables = [Table(title, rows, columns, keys=("ranks", "size", "algorithm"), legend=legend)]
    checked = [r for r in rows if r["wrong"] >= 0]
    notes = [
        f"links: {spec.link_source}"
        + (f"; {spec.cores} shared CPU(s)" if spec.cores else "")
        + (f"; segments of {format_size(spec.segment_bytes)}" if spec.segment_bytes else "; whole messages"),
        f"wrong values: {sum(r['wrong'] for r in checked)} {'OK' if not failures else 'FAILED'} "
        f"({len(checked)} of {len(rows)} rows carried data and were checked)",
        f"simulated {stats['messages']:,} messages ({stats['events']:,} events) in {stats['wall_s']:.2f} s"
        + (
            f"; folded rows (mode 'folded'): rank 0 ran {stats['folded_run']:,} of them for all ranks"
            if stats["folded_run"]
            else ""
        ),
    ]
    files = []
    if spec.crossover:
        from playground.sim.crossover import crossover_table, plot_crossover

        table = crossover_table(spec, crossovers)
        tables.append(table)
        files.append(plot_crossover(spec, table.rows, run_dir / "crossover.png"))
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, files=files)


def _describe(spec: SimSpec) -> dict:
    """The resolved simulation, as simulation.yaml and result.json record it."""
    d = asdict(replace(spec, calibration=None))
    d["calibration"] = spec.calibration.path if spec.calibration else None
    d["intra"], d["inter"] = spec.intra.describe(), spec.inter.describe()
    d["algorithms"], d["ranks"], d["sizes"] = list(spec.algorithms), list(spec.ranks), list(spec.sizes)
    return d


MEASURED_COLUMNS = {"measured_us": "measured (us)", "vs_measured": "sim/measured"}


def load_measured(run_dirs: list[str]) -> dict[tuple[int, str, int], float]:
    """(ranks, algorithm, size) -> measured time (us) from the result.json of bench/run directories;
    the median where several runs measured the same point (repeat a bench on a noisy machine)."""
    times: dict[tuple[int, str, int], list[float]] = {}
    for d in run_dirs:
        path = Path(d) / "result.json"
        try:
            result = json.loads(path.read_text())
            for r in result["rows"]:
                key = (int(result["ranks"]), r["algorithm"].split("->")[0], int(r["size"]))
                times.setdefault(key, []).append(float(r["time_us"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ScenarioError(
                f"--measured {d}: not a run directory with a result.json of rows ({e})"
            ) from None
    return {key: statistics.median(ts) for key, ts in times.items()}


def add_measured(rows: list[dict], measured: dict) -> list[dict]:
    out = []
    for r in rows:
        t = measured.get((r["ranks"], r["algorithm"], r["size"]))
        extra = {} if t is None else {"measured_us": t, "vs_measured": r["time_us"] / t if t > 0 else None}
        out.append({**r, **extra})
    return out
