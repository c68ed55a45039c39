"""`python -m playground` subcommands: run, list, inspect, node, bench, simulate, calibrate, lecture, results, chaos, serve."""

import argparse
import os
import sys
from pathlib import Path

from playground.comm.registry import LAUNCHED
from playground.core.errors import ScenarioError
from playground.core.rundir import EXIT_BAD_INPUT

WIDE_HELP = "print each table in one piece at its full width, however wide the terminal (PLAYGROUND_WIDE=1)"


def _cmd_run(args) -> int:
    from playground.config.scenario import load_scenario
    from playground.launcher.run import execute

    if args.wide:
        os.environ["PLAYGROUND_WIDE"] = "1"

    baseline = [f"params.baseline={args.baseline}"] if args.baseline else []
    scenario = load_scenario(
        args.scenario,
        ranks=args.ranks,
        transport=args.transport,
        overrides=[*(args.set or []), *baseline],
        hosts=args.hosts,
        link=args.link,
        said={b: f"--baseline {args.baseline}" for b in baseline},
    )
    return execute(scenario, Path(args.out)).code


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


def _cmd_bench(args) -> int:
    from playground.commands.bench import run_bench

    return run_bench(args)


def _cmd_simulate(args) -> int:
    from playground.sim.command import run_simulate

    return run_simulate(args)


def _cmd_calibrate(args) -> int:
    from playground.commands.calibrate import run_calibrate

    return run_calibrate(args)


def _cmd_serve(args) -> int:
    from playground.commands.serve import run_serve

    return run_serve(args)


def _cmd_results(args) -> int:
    from playground.commands.results import run_results

    return run_results(
        args.sections, args.quick, args.rounds, Path(args.out), Path(args.work), args.resume, args.max_minutes
    )


def _cmd_chaos(args) -> int:
    from playground.commands.chaos import run_chaos

    return run_chaos(args)


def _cmd_lecture(args) -> int:
    from playground.lecture.command import run_lecture

    return run_lecture(args.sections, args.quick, Path(args.out))


def build_parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """The command line; `parser_class` is also each subcommand's (the Python API passes one whose
    `error` raises instead of exiting)."""
    p = parser_class(prog="python -m playground", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

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
    r.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    r.add_argument("--wide", action="store_true", help=WIDE_HELP)
    r.set_defaults(func=_cmd_run)

    sub.add_parser("list", help="list the built-in scenarios").set_defaults(func=_cmd_list)

    i = sub.add_parser("inspect", help="summarise a run's per-rank timing logs")
    i.add_argument("run_dir", nargs="?", default="runs/latest")
    i.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace (Perfetto, chrome://tracing)")
    i.add_argument("--plot", metavar="FILE.png", help="draw the per-rank timeline")
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

    from playground.commands.bench import add_bench_parser
    from playground.commands.calibrate import add_calibrate_parser
    from playground.commands.chaos import add_chaos_parser
    from playground.commands.results import add_results_parser
    from playground.commands.serve import add_serve_parser
    from playground.sim.command import add_simulate_parser

    add_bench_parser(sub, _cmd_bench)
    add_simulate_parser(sub, _cmd_simulate)
    add_calibrate_parser(sub, _cmd_calibrate)
    add_results_parser(sub, _cmd_results)
    add_chaos_parser(sub, _cmd_chaos)
    add_serve_parser(sub, _cmd_serve)

    lec = sub.add_parser(
        "lecture",
        help="run every section of the lecture and write one page beside its figures",
        description="Runs the scenarios of each section of the lecture in its order, one at a time, and "
        "writes runs/<timestamp>-lecture/index.html (also runs/latest) and summary.md: per section the "
        "commands, tables, plots, and the lecture's figures beside this machine's and the model's.",
    )
    lec.add_argument("--sections", metavar="1,2,5", help="only these sections (1-5; default: all)")
    lec.add_argument(
        "--quick", action="store_true", help="smaller sizes and fewer iterations (about 1.5 min)"
    )
    lec.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    lec.set_defaults(func=_cmd_lecture)
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
    return build_parser(parser_class).parse_args(_attach_signed_values(argv))


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
