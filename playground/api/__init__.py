"""The playground from Python: `import playground as pg`, then `pg.run`, `pg.bench`, `pg.simulate`
and `pg.launch` (docs/python-api.md).

Each goes through the command line's own code: `run` loads the scenario as `run --set` does and
calls `playground.launcher.run.execute`; `bench` and `simulate` build the command's own config from
their keywords (`BenchConfig.from_flags`, `SimulateConfig.from_flags`: the keywords are the flags,
with the command's defaults and checks) and call what the command runs (`bench.benchmark`,
`sim.command.simulate_sweep`); `launch` runs a function of the caller's through the same launcher,
as a scenario whose node is that function.
They return a `Result` (result.py) of the run's result.json. What the command would exit with
becomes: 2 (bad input) a ScenarioError or ParamError, raised before anything starts, with the line
the command prints; 1 (the run failed) a `RunFailed` carrying the root cause and the result; 130
(Ctrl-C, a notebook's stop button) KeyboardInterrupt, once every rank is stopped and its scratch
files are gone.

Ranks are spawned here, not forked as by the command line: the caller may be a Jupyter kernel,
whose ZeroMQ I/O threads a fork would copy mid-flight, and a function from a notebook cell, a
lambda or a closure reaches a spawned rank by value (dill, `worker.FunctionByValue`).

What goes where: this module, the four calls; arguments.py, keywords -> overrides, and a command's
keywords checked against its flags; result.py, the `Result` and how it shows itself in a notebook.
"""

import dataclasses
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from playground.api.arguments import configure, override_values
from playground.api.result import OutputFile, Result
from playground.core.errors import ParamError, RunFailed, ScenarioError
from playground.core.flags import choice
from playground.core.rundir import EXIT_INTERRUPTED, EXIT_OK, Finished
from playground.launcher.launch import START_METHODS

__all__ = ["OutputFile", "Result", "bench", "launch", "run", "simulate"]

DEFAULT_START_METHOD = "spawn"


def run(
    scenario: str | os.PathLike,
    ranks: int | None = None,
    *,
    transport: str | None = None,
    hosts: int | None = None,
    link: str | None = None,
    params: dict | None = None,
    out: str | os.PathLike = "runs",
    echo: bool = False,
    start_method: str = DEFAULT_START_METHOD,
    **overrides: Any,
) -> Result:
    """`python -m playground run SCENARIO`: a built-in name or a YAML path; `ranks`, `transport`,
    `hosts`, `link` and `out` as the command's flags, any other keyword a `--set` (arguments.py:
    `sizes=["8", "1MiB"]` is params.sizes). `echo`: also print what the command prints."""
    from playground.config.scenario import load_scenario
    from playground.launcher.run import execute

    _check_start_method(start_method)
    loaded = load_scenario(
        os.fspath(scenario),
        ranks=ranks,
        transport=transport,
        hosts=hosts,
        link=link,
        values=override_values(overrides, params),
    )
    return _result(execute(loaded, Path(out), _console(echo), start_method))


def bench(
    collective: str, *, echo: bool = False, start_method: str = DEFAULT_START_METHOD, **flags: Any
) -> Result:
    """`python -m playground bench COLLECTIVE --flag value ...` (allreduce, ..., p2p); a keyword is
    a flag: `pg.bench("allreduce", ranks=4, algo="ring,tree", sizes="8..16MiB")`."""
    from playground.commands.bench_commands import BENCH_COMMANDS

    _check_start_method(start_method)
    command = BENCH_COMMANDS[choice("bench", "bench_command", collective, BENCH_COMMANDS)]
    if command.measure is None:
        raise ScenarioError(
            f"bench {collective}: a report of several runs, from the command line only: "
            f"python -m playground bench {collective}"
        )
    config = configure(f"bench {collective}", command.make, flags)
    return _result(command.measure(config, _console(echo), start_method))


def simulate(collective: str, *, echo: bool = False, **flags: Any) -> Result:
    """`python -m playground simulate COLLECTIVE --flag value ...`, in this process (no ranks are
    started): `pg.simulate("allreduce", ranks=1024, algo="ring,tree", sizes="1KiB..1GiB")`."""
    from playground.sim.command import simulate_sweep
    from playground.sim.options import SimulateConfig

    config = configure("simulate", functools.partial(SimulateConfig.from_flags, collective), flags)
    return _result(simulate_sweep(config, _console(echo)))


def launch(
    function: Callable,
    ranks: int,
    params: dict | None = None,
    *,
    transport: str = "ipc",
    timeout_s: float = 30.0,
    name: str | None = None,
    bind: str = "auto",
    out: str | os.PathLike = "runs",
    echo: bool = False,
    start_method: str = DEFAULT_START_METHOD,
) -> Result:
    """Run `function(comm, params)` on `ranks` rank processes, as a node's `main` runs: a run
    directory, rank logs, result.json; `params` is a plain dict (scenario.yaml saves it). Returns
    what each rank returned as `Result.returned`. The function may come from a notebook cell, be a
    lambda or a closure: it is sent to the spawned ranks by value. `bind` pins ranks to CPUs as the
    scenario key of that name does (auto: over shm, when each rank has a CPU of its own)."""
    from playground.config.scenario import function_scenario
    from playground.launcher.run import execute
    from playground.launcher.worker import FunctionByValue

    _check_start_method(start_method)
    scenario = function_scenario(function, ranks, params, transport, timeout_s, name, bind)
    if start_method != "fork":  # a forked rank has the function already
        try:
            by_value = FunctionByValue(function)
        except Exception as e:  # noqa: BLE001 - whatever dill cannot pickle, said in one line
            raise ScenarioError(
                f"{scenario.source}: cannot send {scenario.node.partition(':')[2]} to the ranks "
                f"(dill: {type(e).__name__}: {e}); make what it uses inside it, or pass plain data in params"
            ) from None
        scenario = dataclasses.replace(scenario, function=by_value)
    return _result(execute(scenario, Path(out), _console(echo), start_method))


def _check_start_method(start_method: str) -> None:
    if start_method not in START_METHODS:
        raise ParamError("start_method", f"expected one of {', '.join(START_METHODS)}, got {start_method!r}")


def _console(echo: bool) -> Console | None:
    """Where the command's own output goes: the terminal's console (None: the command's default),
    or nowhere; the progress bar and a failure's report go to stderr either way."""
    return None if echo else Console(quiet=True)


def _result(finished: Finished) -> Result:
    """The command's exit status as Python: a Result, RunFailed, or KeyboardInterrupt."""
    if finished.code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    result = Result(finished.result)
    if finished.code == EXIT_OK:
        return result
    root = finished.outcome.root_cause if finished.outcome is not None else None
    if root is None:
        raise RunFailed((result.failures or ["the run failed"])[0], result=result)
    raise RunFailed(
        root.headline(),
        result=result,
        rank=root.rank,
        kind=root.kind,
        error_type=root.error_type,
        traceback=root.traceback,
    )
