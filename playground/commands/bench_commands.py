"""`bench`'s sub-commands, one `BenchCommand` each: `bench allreduce` (and every other collective of
the registry), `bench p2p`, `bench table`, `bench copy`, `bench serving`, `bench speculative`,
`bench compute`.

Each names its flags (a function that adds them to its parser, no defaults: those are its
config's), its config (`from_flags`: flags -> a checked, frozen config) and what it runs. The
command line makes a sub-parser of each; the Python API (`pg.bench`) builds the same config from
keywords and calls its `measure`. A report of several runs (table, copy, serving, speculative) has
none and stays on the command line.

Adding a sub-command: its config in bench_config.py (or its own module), a function that runs it,
its flags below, and one `BenchCommand` line in `BENCH_COMMANDS`.
"""

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from playground.collectives import ALGORITHMS
from playground.comm.registry import LAUNCHED
from playground.commands import bench, bench_config, bench_serving, benchtable, compute_bench, copybw
from playground.commands.bench_config import DTYPES, OPS, BenchConfig, P2PConfig
from playground.core.rundir import Finished
from playground.display.report import WIDE_HELP
from playground.models.costs import PRESETS


@dataclass(frozen=True)
class BenchCommand:
    name: str
    help: str
    add_flags: Callable[[argparse.ArgumentParser], None]
    make: Callable[..., Any]  # flags -> config
    run: Callable[[Any], int]  # config -> exit status (the command line)
    measure: Callable[..., Finished] | None = None  # (config, console, start_method) -> Finished (the API)


def _ranks(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument("--ranks", "-n", type=int, help=f"rank processes (default {default})")


def _sizes(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--sizes",
        "-s",
        help=f"'8..64MiB' doubles like nccl-tests -b/-e/-f 2, or a comma list '8,1KiB,16MiB' "
        f"(default {default})",
    )
    p.add_argument("--step", type=int, help="multiply sizes by this factor in a range (default 2)")


def _iterations(p: argparse.ArgumentParser, iters: str, warmup: str) -> None:
    p.add_argument("--iters", "-i", type=int, help=f"timed iterations per size ({iters})")
    p.add_argument("--warmup", "-w", type=int, help=f"untimed iterations per size ({warmup})")


def _trace_messages(p: argparse.ArgumentParser, who: str) -> None:
    p.add_argument(
        "--trace-messages",
        action="store_true",
        help="also log one event per message (what `inspect` splits time by); off: they cost ~2.5 us "
        f"of an 8-byte all-reduce here, and {who} log nothing",
    )


def _run_flags(p: argparse.ArgumentParser) -> None:
    """What every sub-command that launches our ranks takes: its timeout, where its runs go, how its
    tables are shown (`--wide`, not the config's: the terminal's), and any other scenario key."""
    p.add_argument("--timeout", type=float, help="seconds any single wait may take (default 60)")
    p.add_argument("--out", help="directory for run directories (default runs)")
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any other scenario key, as for `run` (e.g. fault.rank=1 fault.action=corrupt)",
    )


def add_collective_flags(p: argparse.ArgumentParser) -> None:
    _ranks(p, 8)
    p.add_argument(
        "--algo", help="comma list of algorithms (allreduce: ring,tree,hd,rd,auto; default: all but auto)"
    )
    _sizes(p, bench_config.COLLECTIVE_SIZES)
    p.add_argument("--transport", choices=LAUNCHED, help="data plane (default ipc)")
    p.add_argument("--dtype", "-d", choices=DTYPES, help="element type (default float32)")
    p.add_argument("--op", "-o", choices=OPS, help="reduction (default sum)")
    _iterations(p, "default 20", "default 5")
    p.add_argument("--segment", help="segment size, e.g. 1MiB (the pipelining unit)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check (#wrong = -1)")
    p.add_argument(
        "--inplace",
        action="store_true",
        help="allreduce, broadcast, reduce: also measure in place (nccl-tests' in-place columns: the "
        "result overwrites the input); on with --baseline, whose libraries are measured in both forms",
    )
    p.add_argument(
        "--link",
        metavar="SPEC",
        help=f"what the model columns price: a preset ({', '.join(PRESETS)}) or a calibration.json of "
        "`calibrate` (default: ./calibration.json or $PLAYGROUND_CALIBRATION, else a labelled default)",
    )
    p.add_argument("--baseline", help="comma list: gloo (torch.distributed), mpi (mpi4py)")
    _trace_messages(p, "the baselines")
    _run_flags(p)


def add_p2p_flags(p: argparse.ArgumentParser) -> None:
    _ranks(p, 2)
    _sizes(p, bench_config.P2P_SIZES)
    p.add_argument("--transport", choices=LAUNCHED, help="data plane (default ipc)")
    _iterations(p, "default 20", "default 5")
    _trace_messages(p, "raw pyzmq's ranks")
    _run_flags(p)


def add_table_flags(p: argparse.ArgumentParser) -> None:
    _sizes(p, benchtable.DEFAULT_SIZES)
    p.add_argument(
        "--algo", help="comma list of our algorithms, the best per size shown (default ring,tree,hd,rd)"
    )
    _iterations(p, "default 100 below 1 MiB, 10 from it", "default 20 below 1 MiB, 3 from it")
    p.add_argument("--timeout", type=float, help="seconds any single wait may take (default 60)")
    p.add_argument("--out", help="directory for run directories (default runs)")
    p.add_argument("--rounds", type=int, help="alternating rounds (default 3)")
    p.add_argument("--rank-counts", help="rank counts (default 2,4,8)")
    p.add_argument(
        "--systems",
        help="comma list of ipc, shm, gloo, mpi (the default) and ipc-sockets (ZeroMQ without rings)",
    )


def add_copy_flags(p: argparse.ArgumentParser) -> None:
    _sizes(p, copybw.DEFAULT_SIZES)
    p.add_argument("--iters", "-i", type=int, help="copies timed per size and process count (default 20)")
    p.add_argument("--rank-counts", help="rank counts whose all-reduce bound is shown (default 2,4,8)")
    p.add_argument("--out", help="directory for run directories (default runs)")


def add_compute_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenarios",
        help=f"the training scenarios whose shapes to run (default {compute_bench.SCENARIOS})",
    )
    p.add_argument(
        "--rank-counts",
        help=f"rank counts, one rank's share of the batch each (default {compute_bench.RANKS})",
    )
    p.add_argument("--rounds", type=int, help=f"alternating rounds (default {compute_bench.ROUNDS})")
    p.add_argument("--systems", help="comma list of native, numpy, torch (default: all three)")
    p.add_argument("--out", help="directory for run directories (default runs)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any other scenario key, as for `run` (e.g. model.d_model=64)",
    )


def _collective(name: str) -> BenchCommand:
    return BenchCommand(
        name,
        "the collective as nccl-tests times it: our algorithms' time, algbw, busbw (--baseline: Gloo's, "
        "MPI's beside)",
        add_collective_flags,
        functools.partial(BenchConfig.from_flags, name),
        bench.run_bench,
        bench.benchmark,
    )


BENCH_COMMANDS: dict[str, BenchCommand] = {
    c.name: c
    for c in (
        *(_collective(name) for name in ALGORITHMS),
        BenchCommand(
            "p2p",
            "our send/recv beside raw pyzmq on the same transport",
            add_p2p_flags,
            P2PConfig.from_flags,
            bench.run_p2p,
            bench.p2p,
        ),
        BenchCommand(
            "table",
            "the README's table: ours (ipc, shm) beside Gloo and MPICH, alternating rounds",
            add_table_flags,
            benchtable.TableConfig.from_flags,
            benchtable.run_table,
        ),
        BenchCommand(
            "copy",
            "the machine's copy bandwidth, one core and all, and the shm all-reduce's bound",
            add_copy_flags,
            copybw.CopyConfig.from_flags,
            copybw.run_copy,
        ),
        BenchCommand(
            "serving",
            "the HTTP server (`serve`) under Poisson load: latency against load, the knee beside M/D/1",
            bench_serving.add_serving_flags,
            bench_serving.serving_config,
            bench_serving.run_serving,
        ),
        BenchCommand(
            "speculative",
            "speculative decoding's speed-up (prompt lookup) at several batch sizes",
            bench_serving.add_speculative_flags,
            bench_serving.speculative_config,
            bench_serving.run_speculative,
        ),
        BenchCommand(
            "compute",
            "a training rank's forward + backward, ours against torch's, and where our time goes",
            add_compute_flags,
            compute_bench.ComputeConfig.from_flags,
            compute_bench.run_compute,
        ),
    )
}
