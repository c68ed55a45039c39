"""`python -m playground` subcommands: run, list, inspect, node, bench, simulate, calibrate, lecture, results, chaos, serve, watch."""

import argparse
import importlib
import operator
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.comm.registry import LAUNCHED
from playground.core.errors import ScenarioError
from playground.core.rundir import EXIT_BAD_INPUT
from playground.display.report import WIDE_HELP


def _cmd_run(args) -> int:
    from playground.config.scenario import load_scenario
    from playground.launcher.run import execute

    if args.wide:
        os.environ["PLAYGROUND_WIDE"] = "1"

    baseline = [f"params.baseline={args.baseline}"] if args.baseline else []
    restarts = [f"recovery.max_restarts={args.max_restarts}"] if args.max_restarts is not None else []
    source = _resumed_scenario(args.scenario, Path(args.resume)) if args.resume else args.scenario
    scenario = load_scenario(
        source,
        ranks=args.ranks,
        transport=args.transport,
        overrides=[*(args.set or []), *baseline, *restarts],
        hosts=args.hosts,
        link=args.link,
        said={
            **{b: f"--baseline {args.baseline}" for b in baseline},
            **{r: f"--max-restarts {args.max_restarts}" for r in restarts},
        },
    )
    resume_dir = Path(args.resume) if args.resume else None
    if args.live or args.live_port is not None:
        from playground.live.command import run_live

        return run_live(
            lambda on_run_dir: (
                execute(scenario, Path(args.out), resume_dir=resume_dir, on_run_dir=on_run_dir).code
            ),
            args.live_port or 0,
        )
    return execute(scenario, Path(args.out), resume_dir=resume_dir).code


def _resumed_scenario(name: str, run_dir: Path) -> str:
    """The scenario file `run NAME --resume RUN_DIR` goes on with: the one RUN_DIR ran (its
    scenario.yaml, with the --set values it was given), if it runs NAME's node."""
    import yaml

    from playground.config.scenario import find_scenario_file

    saved = run_dir / "scenario.yaml"
    if not saved.is_file():
        raise ScenarioError(f"--resume {run_dir}: not a run directory (no scenario.yaml in it)")
    ran = (yaml.safe_load(saved.read_text()) or {}).get("node")
    named = (yaml.safe_load(find_scenario_file(name).read_text()) or {}).get("node")
    if ran != named:
        raise ScenarioError(f"--resume {run_dir}: it ran node {ran}, scenario {name} runs {named}")
    return str(saved)


def _cmd_list(args) -> int:
    import yaml

    from playground.config.scenario import builtin_dir, builtin_names
    from playground.display.report import make_console

    console = make_console()
    names = builtin_names()
    width = max(map(len, names), default=0) + 2
    for name in names:
        try:
            raw = yaml.safe_load((builtin_dir() / f"{name}.yaml").read_text()) or {}
        except Exception:  # noqa: BLE001 - a broken file still gets listed
            raw = {}
        ranks = raw.get("ranks", "?")
        console.print(
            f"[bold]{name:<{width}}[/bold]{ranks:>3} rank{'' if ranks == 1 else 's'}  "
            f"{raw.get('description', '')}",
            highlight=False,
        )
    return 0


def _cmd_inspect(args) -> int:
    from playground.commands.inspect import inspect_run
    from playground.core.errors import ParamError

    if args.flight:
        from playground.commands.inspect_flight import inspect_flight

        return inspect_flight(Path(args.run_dir))

    if args.diagram is None:
        given = [
            f for f, v in (("--diagram-time", args.diagram_time), ("--diagram-ops", args.diagram_ops)) if v
        ]
        if given or args.diagram_max is not None:
            raise ParamError(given[0] if given else "--diagram-max", "needs --diagram FILE.svg")
    elif Path(args.diagram).suffix.lower() != ".svg":
        raise ParamError("--diagram", f"the diagram is written as SVG: give a FILE.svg, got {args.diagram}")
    if args.diagram_max is not None and args.diagram_max < 1:
        raise ParamError("--diagram-max", f"must be >= 1, got {args.diagram_max}")
    return inspect_run(
        Path(args.run_dir),
        trace_path=args.trace,
        plot_path=args.plot,
        diagram_path=args.diagram,
        diagram_options={
            "time": args.diagram_time or "logical",
            "ops": args.diagram_ops,
            **({"max_messages": args.diagram_max} if args.diagram_max is not None else {}),
        },
    )


def _cmd_node(args) -> int:
    from playground.launcher.external import run_external

    return run_external(args.scenario, overrides=args.set or [], out=Path(args.out))


# The dests that are not a command's flags: which sub-command was chosen, what runs it, and how the
# terminal shows its tables (--wide).
_NOT_FLAGS = ("command", "bench_command", "func", "wide")


@dataclass(frozen=True)
class Configured:
    """A command that has a config: its flags (what the parser found; a flag not given is absent, and
    `make` has its default) become the config (`make`), which `run` runs to an exit status."""

    make: Callable[..., Any]
    run: Callable[[Any], int]

    def config(self, args: argparse.Namespace) -> Any:
        return self.make(**{k: v for k, v in vars(args).items() if k not in _NOT_FLAGS})

    def __call__(self, args: argparse.Namespace) -> int:
        config = self.config(args)
        if getattr(args, "wide", False):
            os.environ["PLAYGROUND_WIDE"] = "1"
        return self.run(config)


def _configured(
    sub: argparse._SubParsersAction,
    name: str,
    configured: Configured,
    add_flags: Callable[[argparse.ArgumentParser], None],
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A sub-parser whose flags have no defaults of their own (the config's are the defaults), so
    that the command line and the Python API build the same config from the same flags."""
    p = sub.add_parser(name, help=help, description=description, argument_default=argparse.SUPPRESS)
    add_flags(p)
    p.set_defaults(func=configured)
    return p


def _add_run(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("run", help="run a scenario with N ranks")
    r.add_argument("scenario", help="built-in name (see `list`) or path to a YAML file")
    r.add_argument("--ranks", "-n", type=int, help="number of rank processes (1-64)")
    r.add_argument("--transport", choices=LAUNCHED, help="data plane (default: the scenario's, ipc)")
    r.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override any scenario key, e.g. params.iters=5"
    )
    r.add_argument(
        "--hosts",
        type=int,
        metavar="K",
        help="emulate K hosts (network namespaces on a bridge; needs root); ranks are placed in blocks",
    )
    r.add_argument(
        "--link",
        metavar="RATE[,delay=D]",
        help="each host's link with --hosts, e.g. 1gbit or 100mbit,delay=200us (tbf; delay in the transport)",
    )
    r.add_argument(
        "--baseline",
        metavar="NAME",
        help="also run the scenario's baseline beside ours and compare (train: ddp, PyTorch DDP over "
        "Gloo; train-pipeline: pipelining, torch.distributed.pipelining's GPipe and 1F1B over Gloo; "
        "train-tensor: tensor_parallel, torch.distributed.tensor.parallel over Gloo); the same as --set "
        "params.baseline=NAME",
    )
    r.add_argument(
        "--max-restarts",
        type=int,
        metavar="N",
        help="when a rank fails, stop the group and start it again from the newest whole checkpoint, up "
        "to N times (the same as --set recovery.max_restarts=N; default: the scenario's, 0)",
    )
    r.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="go on with a run that was stopped (Ctrl-C, or its launcher killed), in its own directory, "
        "from its newest whole checkpoint, with the scenario it ran",
    )
    r.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    r.add_argument("--wide", action="store_true", help=WIDE_HELP)
    r.add_argument(
        "--live",
        action="store_true",
        help="serve a page on 127.0.0.1 that shows the run as it goes (each rank's operation, bytes "
        "between ranks, loss, KV blocks, stragglers, the root cause) and /metrics; after the run it "
        "shows the final state until Ctrl-C",
    )
    r.add_argument(
        "--live-port",
        type=int,
        metavar="PORT",
        help="the live page's port (implies --live; default: a free one)",
    )
    r.set_defaults(func=_cmd_run)


def _add_inspect(sub: argparse._SubParsersAction) -> None:
    i = sub.add_parser("inspect", help="summarise a run's per-rank timing logs")
    i.add_argument("run_dir", nargs="?", default="runs/latest")
    i.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace (Perfetto, chrome://tracing)")
    i.add_argument("--plot", metavar="FILE.png", help="draw the per-rank timeline")
    i.add_argument(
        "--flight",
        action="store_true",
        help="what the ranks' flight recorders say: the first collective they disagree on, ranks that "
        "never joined one, each rank's last completed one, the rank the others wait for",
    )
    i.add_argument(
        "--diagram",
        metavar="FILE.svg",
        help="draw the messages between ranks as a Lamport diagram (one lane per rank, an arrow per "
        "message; at most 8 ranks)",
    )
    i.add_argument(
        "--diagram-time",
        choices=["logical", "real"],
        help="the diagram's time axis: logical (Lamport order, one row per causal step; default) or "
        "real (the aligned clocks)",
    )
    i.add_argument(
        "--diagram-max",
        type=int,
        metavar="N",
        help="draw at most the first N messages (default 300; beyond it the diagram says so)",
    )
    i.add_argument(
        "--diagram-ops",
        metavar="all|NAME",
        help="only the messages inside timed operations: all of them, or those of one name or "
        "algorithm (e.g. ring); leaves out the barriers between them",
    )
    i.set_defaults(func=_cmd_inspect)


def _add_node(sub: argparse._SubParsersAction) -> None:
    nd = sub.add_parser(
        "node",
        help="run one rank under another launcher (torchrun, mpiexec, srun, a shell loop)",
        description="One rank of a run started by another launcher; the rank comes from RANK/"
        "WORLD_SIZE (or PMI_*, OMPI_COMM_WORLD_*, SLURM_*), the coordinator from "
        "MASTER_ADDR/MASTER_PORT. See docs/external-launchers.md.",
    )
    nd.add_argument("scenario", help="built-in name (see `list`) or path to a YAML file")
    nd.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override any scenario key, e.g. params.iters=5"
    )
    nd.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    nd.set_defaults(func=_cmd_node)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """`bench` and a sub-parser per sub-command of its registry (commands/bench_commands.py)."""
    from playground.commands.bench_commands import BENCH_COMMANDS

    b = sub.add_parser(
        "bench",
        help="benchmark collectives like nccl-tests (and p2p against raw pyzmq)",
        description="What to measure: a collective (our algorithms, nccl-tests' columns, baselines "
        "beside them), p2p (our send/recv beside raw pyzmq), table (the README's table: ours over ipc "
        "and shm beside Gloo and MPICH), copy (the machine's copy bandwidth and the shm all-reduce's "
        "bound), serving (the HTTP server under Poisson load), speculative (speculative decoding's "
        "speed-up).",
    )
    leaves = b.add_subparsers(dest="bench_command", required=True)
    for c in BENCH_COMMANDS.values():
        _configured(leaves, c.name, Configured(c.make, c.run), c.add_flags, help=c.help, description=c.help)


# The commands with a config of their own (besides `bench`): name -> (their module, and in it the
# config's `from_flags`, what runs it, what adds its flags); the module is imported when added.
_CONFIGURED = {
    "simulate": ("playground.sim.command", "SimulateConfig.from_flags", "run_simulate", "add_simulate_flags"),
    "calibrate": ("playground.commands.calibrate", "CalibrateConfig.from_flags", "run_calibrate", "add_calibrate_flags"),
    "results": ("playground.commands.results", "ResultsConfig.from_flags", "run_results", "add_results_flags"),
    "chaos": ("playground.chaos.command", "ChaosConfig.from_flags", "run_chaos", "add_chaos_flags"),
    "serve": ("playground.commands.serve", "serve_config", "run_serve", "add_serve_flags"),
    "lecture": ("playground.lecture.command", "LectureConfig.from_flags", "run_lecture", "add_lecture_flags"),
    "watch": ("playground.live.command", "WatchConfig.from_flags", "run_watch", "add_watch_flags"),
}  # fmt: skip


def _configured_command(name: str) -> Callable[[argparse._SubParsersAction], None]:
    """What adds `name`'s sub-parser (`_CONFIGURED`): its module's help, flags, config and run."""

    def add(sub: argparse._SubParsersAction) -> None:
        module_name, *names = _CONFIGURED[name]
        module = importlib.import_module(module_name)
        make, run, add_flags = (operator.attrgetter(n)(module) for n in names)
        _configured(sub, name, Configured(make, run), add_flags, module.HELP, module.DESCRIPTION)

    return add


def _add_list(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("list", help="list the built-in scenarios").set_defaults(func=_cmd_list)


# Every command, in the order `--help` lists them: what adds its sub-parser (and imports its module).
COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "run": _add_run,
    "list": _add_list,
    "inspect": _add_inspect,
    "node": _add_node,
    "bench": _add_bench,
    **{name: _configured_command(name) for name in _CONFIGURED},
}


def build_parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser, only: str | None = None
) -> argparse.ArgumentParser:
    """The command line; `parser_class` is also each subcommand's. With `only` (one of `COMMANDS`),
    that command's sub-parser alone: a command then starts without importing the others' modules."""
    p = parser_class(prog="python -m playground", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if only is None or name == only:
            add(sub)
    return p


# Flags whose value may start with '-' (a negative time is bad input we want to name, not argparse's
# "expected one argument"): `--alpha -1us` is read as `--alpha=-1us`.
_SIGNED_VALUE_FLAGS = ("--alpha", "--beta", "--gamma")


def _attach_signed_values(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in _SIGNED_VALUE_FLAGS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def parse_args(
    argv: list[str], parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.Namespace:
    # the command's own sub-parser alone; for the help or an unknown command, every one
    command = argv[0] if argv and argv[0] in COMMANDS else None
    return build_parser(parser_class, only=command).parse_args(_attach_signed_values(argv))


def main(argv: list[str] | None = None) -> int:
    from playground.core.argparser import OneLineParser

    args = parse_args(sys.argv[1:] if argv is None else argv, OneLineParser)
    try:
        return args.func(args)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
