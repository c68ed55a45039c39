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
over rounds (benchtable.py); `bench copy`, the machine's copy bandwidth (copybw.py); `bench compute`,
a training rank's compute against torch's (compute_bench.py).

What goes where: bench_commands.py, the sub-commands and their flags (add one there);
bench_config.py, what each is given, checked; this module, what `bench COLLECTIVE` and `bench p2p`
run.
"""

import dataclasses
import json
import math
from pathlib import Path

from rich.console import Console

from playground.collectives.bench_report import (
    COLUMNS,
    FORMS,
    IN_PLACE_COLUMNS,
    add_model_columns,
    nccl_table,
    with_model_columns,
    wrong_row_failures,
)
from playground.commands.bench_config import BenchConfig, P2PConfig
from playground.core.rundir import Finished
from playground.core.sizes import format_size
from playground.display.report import Table, make_console, render_table
from playground.models.costs import Link


def run_bench(config: BenchConfig) -> int:
    return benchmark(config).code


def benchmark(config: BenchConfig, console: Console | None = None, start_method: str = "fork") -> Finished:
    """`bench COLLECTIVE`: our run, then any baselines beside it; the result is our run's, with the
    baselines' rows and the comparison added. What the command prints goes to `console`; ranks are
    started by `start_method` (`run.execute`)."""
    from playground.launcher.run import execute

    console = console or make_console()
    finished = execute(config.scenario, config.out, console=console, start_method=start_method)
    if finished.code != 0 or not config.baselines:
        _plot(finished.result, [], console)
        return finished
    code = _run_baselines(config, finished.result, console)
    return dataclasses.replace(finished, code=code)


def _run_baselines(config: BenchConfig, result: dict, console: Console) -> int:
    from playground.baselines import BaselineError, available, run_baseline

    err = make_console(stderr=True)
    ranks = config.scenario.ranks
    extra_rows: list[dict] = []
    failed = False
    for name in config.baselines:
        missing = available(name)
        if missing:
            err.print(f"baseline {name} skipped: {missing}", highlight=False)
            continue
        console.print(f"baseline {name}: {ranks} ranks, {len(config.sizes)} sizes ...", highlight=False)
        try:
            rows = run_baseline(
                name,
                config.collective,
                list(config.sizes),
                ranks,
                config.dtype,
                config.op,
                config.iters,
                config.warmup,
                timeout_s=max(300.0, config.timeout_s * 5),
            )
        except BaselineError as e:
            err.print(f"[bold red]baseline {name} failed[/bold red]: {e}", highlight=False)
            failed = True
            continue
        extra_rows += rows
        for line in wrong_row_failures(rows, config.collective):
            err.print(f"[bold red]FAILED[/bold red] baseline {name}: {line}", highlight=False)
            failed = True
    if extra_rows:
        table = baseline_table(config.collective, ranks, extra_rows, result.get("model"))
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


def run_p2p(config: P2PConfig) -> int:
    return p2p(config).code


def p2p(config: P2PConfig, console: Console | None = None, start_method: str = "fork") -> Finished:
    """`bench p2p`: our send/recv beside raw pyzmq (nodes/pingpong.py)."""
    from playground.launcher.run import execute

    return execute(config.scenario, config.out, console=console or make_console(), start_method=start_method)
