"""`python -m playground bench COLLECTIVE ...`: nccl-tests-style tables, plots, optional baselines.

`bench allreduce --ranks 8 --algo ring,tree,hd --sizes 8..64MiB` runs our collective (a normal
run of nodes/collective.py, so it gets a run directory, logs and result.json), then, with
`--baseline gloo,mpi`, the same sizes and rank count through torch.distributed's Gloo and through
MPI, one after the other (never at the same time: they would share the two cores), and prints the
ratio of like to like: each baseline runs every form its library offers, out of place and in place
(nccl-tests' two column sets), ours then measures both too, and our out-of-place time is set
against theirs out of place, our in-place one against theirs in place (`compare`). `bench p2p`
runs our send/recv beside raw pyzmq on the same transport. `--link SPEC` names what the model
columns price (a preset, or a calibration.json of `calibrate`); without it, this machine's
calibration (models/calibration.py), else a labelled default.
`bench table` regenerates the README's table: ours over ipc and shm, Gloo and MPICH, alternately,
over rounds (benchtable.py). `bench compute` is a training rank's compute against torch's
(compute_bench.py).
"""

import dataclasses
import functools
import json
import math
import os
from pathlib import Path

from rich.console import Console

from playground.collectives import ALGORITHMS, IN_PLACE
from playground.collectives.bench_report import (
    COLUMNS,
    FORMS,
    IN_PLACE_COLUMNS,
    add_model_columns,
    nccl_table,
    with_model_columns,
    wrong_row_failures,
)
from playground.comm.registry import LAUNCHED
from playground.config.scenario import load_scenario
from playground.core.dtypes import DTYPES
from playground.core.errors import ScenarioError
from playground.core.rundir import Finished
from playground.core.sizes import format_size, parse_size_range
from playground.display.report import Table, make_console, render_table
from playground.models.calibration import model_from_spec
from playground.models.costs import PRESETS, Link


def add_bench_parser(sub, func) -> None:
    b = sub.add_parser("bench", help="benchmark collectives like nccl-tests (and p2p against raw pyzmq)")
    b.add_argument(
        "collective",
        choices=[*ALGORITHMS, "p2p", "table", "copy", "serving", "speculative", "compute"],
        help="what to measure; `table`: the README's table, ours (ipc, shm) beside Gloo and MPICH; "
        "`copy`: the machine's copy bandwidth, one core and all, and the shm all-reduce's bound; "
        "`serving`: the HTTP server under Poisson load; `speculative`: speculative decoding's speed-up; "
        "`compute`: a training rank's forward + backward, ours against torch's, and where our time goes",
    )
    b.add_argument("--ranks", "-n", type=int, default=None, help="rank processes (default 8; p2p: 2)")
    b.add_argument("--algo", default=None, help="comma list of algorithms (allreduce: ring,tree,hd,auto)")
    b.add_argument(
        "--sizes",
        "-s",
        default="8..64MiB",
        help="'8..64MiB' doubles like nccl-tests -b/-e/-f 2, or a comma list '8,1KiB,16MiB'",
    )
    b.add_argument("--step", type=int, default=2, help="multiply sizes by this factor in a range (default 2)")
    b.add_argument("--transport", choices=LAUNCHED, default="ipc")
    b.add_argument("--dtype", "-d", choices=DTYPES, default="float32")
    b.add_argument("--op", "-o", choices=["sum", "avg", "max", "min"], default="sum")
    b.add_argument(
        "--iters",
        "-i",
        type=int,
        default=None,
        help="timed iterations per size (20; table: 100 below 1 MiB, 10 from it)",
    )
    b.add_argument(
        "--warmup",
        "-w",
        type=int,
        default=None,
        help="untimed iterations per size (5; table: 20 below 1 MiB, 3 from it)",
    )
    b.add_argument("--segment", default=None, help="segment size, e.g. 1MiB (the pipelining unit)")
    b.add_argument("--no-check", action="store_true", help="skip the correctness check (#wrong = -1)")
    b.add_argument(
        "--inplace",
        action="store_true",
        help="allreduce, broadcast, reduce: also measure in place (nccl-tests' in-place columns: the "
        "result overwrites the input); on with --baseline, whose libraries are measured in both forms",
    )
    b.add_argument(
        "--link",
        default=None,
        metavar="SPEC",
        help=f"what the model columns price: a preset ({', '.join(PRESETS)}) or a calibration.json of "
        "`calibrate` (default: ./calibration.json or $PLAYGROUND_CALIBRATION, else a labelled default)",
    )
    b.add_argument("--baseline", default="", help="comma list: gloo (torch.distributed), mpi (mpi4py)")
    b.add_argument(
        "--trace-messages",
        action="store_true",
        help="also log one event per message (what `inspect` splits time by); off: they cost ~2.5 us "
        "of an 8-byte all-reduce here, and the baselines (and p2p's raw pyzmq) log nothing",
    )
    b.add_argument("--timeout", type=float, default=60.0, help="seconds any single wait may take")
    b.add_argument("--out", default="runs", help="directory for run directories")
    b.add_argument(
        "--wide",
        action="store_true",
        help="print each table in one piece at its full width (PLAYGROUND_WIDE=1)",
    )
    t = b.add_argument_group("table")
    t.add_argument(
        "--rounds", type=int, default=None, help="table, compute: alternating rounds (default 3; compute: 5)"
    )
    t.add_argument(
        "--rank-counts",
        default=None,
        help="table, copy, compute: rank counts (default 2,4,8; compute: 1,2,4)",
    )
    t.add_argument(
        "--systems",
        default=None,
        help="table: comma list of ipc, shm, gloo, mpi (the default) and ipc-sockets (ZeroMQ without rings); "
        "compute: of native, numpy, torch (the default: all three)",
    )
    c = b.add_argument_group("compute")
    c.add_argument(
        "--scenarios",
        default=None,
        help="compute: the training scenarios whose shapes to run (default train-modes,train-large)",
    )
    b.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other scenario key, as for `run` (e.g. fault.rank=1 fault.action=corrupt)",
    )
    from playground.commands.bench_serving import add_serving_arguments

    add_serving_arguments(b)
    b.set_defaults(func=func)


def _sizes(text: str, step: int) -> list[int]:
    try:
        return parse_size_range(text, step)
    except ValueError as e:
        raise ScenarioError(f"--sizes {text!r}: {e}") from None


# flags of some forms of `bench` only: flag -> (its argument's name, {form: its default there})
FORM_FLAGS = {
    "--rounds": ("rounds", {"table": 3, "compute": 5}),
    "--rank-counts": ("rank_counts", {"table": "2,4,8", "copy": "2,4,8", "compute": "1,2,4"}),
    "--systems": ("systems", {"table": None, "compute": None}),
    "--scenarios": ("scenarios", {"compute": "train-modes,train-large"}),
}


def check_form_flags(args) -> None:
    """A flag of another form of `bench` is bad input, not a flag silently ignored; the given
    form's own flags get their defaults."""
    for flag, (name, defaults) in FORM_FLAGS.items():
        if args.collective not in defaults and getattr(args, name) is not None:
            raise ScenarioError(
                f"{flag}: only for bench {' and bench '.join(defaults)}, not bench {args.collective}"
            )
        if args.collective in defaults and getattr(args, name) is None:
            setattr(args, name, defaults[args.collective])


def run_bench(args) -> int:
    check_form_flags(args)
    if args.wide:
        os.environ["PLAYGROUND_WIDE"] = "1"
    if args.collective in ("serving", "speculative"):
        from playground.commands import bench_serving

        return (bench_serving.run_serving if args.collective == "serving" else bench_serving.run_speculative)(
            args
        )
    if args.collective == "compute":
        from playground.commands.compute_bench import run_compute

        return run_compute(args)
    if args.collective == "table":
        from playground.commands.benchtable import run_table

        return run_table(args)
    if args.collective == "copy":
        from playground.commands.copybw import run_copy

        return run_copy(args)
    return benchmark(args).code


def benchmark(args, console: Console | None = None, start_method: str = "fork") -> Finished:
    """`bench COLLECTIVE|p2p` from its parsed command line: our run, then any baselines beside it;
    the result is our run's, with the baselines' rows and the comparison added. What the command
    prints goes to `console`; ranks are started by `start_method` (`run.execute`)."""
    from playground.launcher.run import execute

    console = console or make_console()
    check_form_flags(args)
    args.iters = 20 if args.iters is None else args.iters
    args.warmup = 5 if args.warmup is None else args.warmup
    if args.collective == "p2p":
        return _run_p2p(args, functools.partial(execute, console=console, start_method=start_method))
    sizes = _sizes(args.sizes, args.step)
    algos = (args.algo or ",".join(a for a in ALGORITHMS[args.collective] if a != "auto")).split(",")
    baselines = [b for b in args.baseline.split(",") if b]
    sets = {  # each override -> the flag it came from, which a bad value's error names
        f"params.collective={args.collective}": "COLLECTIVE",
        f"params.algorithm=[{','.join(algos)}]": "--algo",
        f"params.sizes=[{','.join(map(str, sizes))}]": "--sizes",
        f"params.dtype={args.dtype}": "--dtype",
        f"params.op={args.op}": "--op",
        f"params.iters={args.iters}": "--iters",
        f"params.warmup={args.warmup}": "--warmup",
        f"params.check={not args.no_check}": "--no-check",
        f"params.trace_messages={args.trace_messages}": "--trace-messages",
        f"timeout_s={args.timeout}": "--timeout",
    }
    if args.segment:
        sets[f"params.segment_bytes={args.segment}"] = "--segment"
    if args.inplace or (baselines and args.collective in IN_PLACE):
        sets["params.inplace=true"] = "--inplace" if args.inplace else "--baseline"
    if args.link:
        try:
            model_from_spec(args.link, args.transport)
        except ScenarioError as e:
            raise ScenarioError(f"--link {args.link}: {e}") from None
        sets[f"params.link={json.dumps(args.link)}"] = "--link"
    sets.update({text: f"--set {text}" for text in args.set})
    scenario = load_scenario(
        "bench",
        ranks=8 if args.ranks is None else args.ranks,
        transport=args.transport,
        overrides=list(sets),
        said=sets,
    )
    if baselines:
        from playground.baselines import BASELINES
        from playground.baselines import COLLECTIVES as BASELINE_COLLECTIVES

        for name in baselines:
            if name not in BASELINES:
                raise ScenarioError(f"--baseline {name!r}: allowed: {', '.join(BASELINES)}")
        if args.collective not in BASELINE_COLLECTIVES:
            raise ScenarioError(f"--baseline: the baselines run {', '.join(BASELINE_COLLECTIVES)}")
    finished = execute(scenario, Path(args.out), console=console, start_method=start_method)
    if finished.code != 0 or not baselines:
        _plot(finished.result, [], console)
        return finished
    code = _run_baselines(args, scenario, sizes, baselines, finished.result, console)
    return dataclasses.replace(finished, code=code)


def _run_baselines(args, scenario, sizes, baselines, result, console: Console) -> int:
    from playground.baselines import BaselineError, available, run_baseline

    err = make_console(stderr=True)
    extra_rows, failed = [], False
    for name in baselines:
        missing = available(name)
        if missing:
            err.print(f"baseline {name} skipped: {missing}", highlight=False)
            continue
        console.print(f"baseline {name}: {scenario.ranks} ranks, {len(sizes)} sizes ...", highlight=False)
        try:
            rows = run_baseline(
                name,
                args.collective,
                sizes,
                scenario.ranks,
                args.dtype,
                args.op,
                args.iters,
                args.warmup,
                timeout_s=max(300.0, args.timeout * 5),
            )
        except BaselineError as e:
            err.print(f"[bold red]baseline {name} failed[/bold red]: {e}", highlight=False)
            failed = True
            continue
        extra_rows += rows
        for line in wrong_row_failures(rows, args.collective):
            err.print(f"[bold red]FAILED[/bold red] baseline {name}: {line}", highlight=False)
            failed = True
    if extra_rows:
        table = baseline_table(args.collective, scenario.ranks, extra_rows, result.get("model"))
        render_table(table, console)
        extra_rows = table.rows
        comparison = compare(result["rows"], extra_rows)
        title = (
            "ours (best algorithm per size and form) against each baseline, out of place against out of "
            "place and in place against in place: x_B = B's time / ours (above 1: ours is faster)"
        )
        render_table(Table(title, comparison, keys=("size", "form")), console)
        result["baseline_rows"] = extra_rows
        result["comparison"] = comparison
        if failed:
            result["ok"] = False
        Path(result["run_dir"], "result.json").write_text(json.dumps(result, indent=1))
    _plot(result, extra_rows, console)
    return 1 if failed or not result["ok"] else 0


def baseline_table(collective: str, ranks: int, rows: list[dict], model: dict | None) -> Table:
    """The baselines' nccl-tests table; with our run's model (result.json's "model"), its columns
    too, each row modelled with the model's pick (a baseline's algorithm is its own to choose)."""
    title = f"{collective} baselines, {ranks} ranks (a form the library does not offer: -)"
    columns = {**COLUMNS, **IN_PLACE_COLUMNS} if any("ip_time_us" in r for r in rows) else COLUMNS
    if not model:
        return nccl_table(title, rows, columns)
    link = Link(model["alpha_s"], model["beta_bytes_per_s"], model["gamma_bytes_per_s"] or math.inf)
    return nccl_table(
        f"{title}\n{model['caption']}; a baseline's row is modelled with the model's pick",
        add_model_columns(rows, collective, ranks, link),
        with_model_columns(columns, collective),
    )


def compare(ours: list[dict], theirs: list[dict]) -> list[dict]:
    """Per form (out of place, then in place) and size: our best time in that form (and which
    algorithm) and, per baseline, its time in the same form and our speed over it (`x_B` = B's time /
    ours). A figure is only ever set against one of its own form: where either side did not measure
    a form (torch's all_reduce has no out-of-place one), the ratio is None."""
    out = []
    for prefix, form in FORMS:
        key = prefix + "time_us"
        best: dict[int, dict] = {}
        for r in ours:
            if r.get(key) is not None and (r["size"] not in best or r[key] < best[r["size"]][key]):
                best[r["size"]] = r
        for size, r in sorted(best.items()):
            row = {
                "size": format_size(size),
                "form": form,
                "ours": r["algorithm"],
                "ours_us": r[key],
                "ours_busbw": r[prefix + "busbw_gbps"],
            }
            for b in theirs:
                if b["size"] == size:
                    name, t = b["algorithm"], b.get(key)
                    row[f"{name}_us"], row[f"{name}_busbw"] = t, b.get(prefix + "busbw_gbps")
                    row[f"x_{name}"] = round(t / r[key], 2) if t is not None and r[key] else None
            out.append(row)
    return out


def _plot(result: dict, baseline_rows: list[dict], console: Console) -> None:
    if not result.get("rows"):
        return
    from playground.display.plot import plot_busbw

    path = Path(result["run_dir"]) / "busbw.png"
    plot_busbw(
        result["rows"] + baseline_rows, path, f"{result.get('collective', '')}, {result['ranks']} ranks"
    )
    console.print(f"plot: {path}", highlight=False)


def _run_p2p(args, execute) -> Finished:
    sizes = _sizes(args.sizes if args.sizes != "8..64MiB" else "64,4KiB,64KiB,1MiB,4MiB,16MiB", args.step)
    sets = {
        f"params.sizes=[{','.join(map(str, sizes))}]": "--sizes",
        f"params.iters={args.iters}": "--iters",
        f"params.warmup={args.warmup}": "--warmup",
        f"timeout_s={args.timeout}": "--timeout",
        f"params.trace_messages={args.trace_messages}": "--trace-messages",
        **{text: f"--set {text}" for text in args.set},
    }
    scenario = load_scenario(
        "pingpong",
        ranks=2 if args.ranks is None else args.ranks,
        transport=args.transport,
        overrides=list(sets),
        said=sets,
    )
    return execute(scenario, Path(args.out))
