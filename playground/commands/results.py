"""`python -m playground results`: the docs' results pages, measured by one command on this machine.

Each page is what the playground's own commands print, run one after the other (never two at once:
they measure the machine), headed by the machine they ran on, the commands, the date and how busy
the machine was. Nothing on those pages is typed by hand; rerun the command to refresh them.

- collectives.md: `bench table`: ours over ZeroMQ and over shared memory against Gloo and MPICH,
  alternating rounds, medians and min-max, speed ratios.
- alltoall.md: `bench alltoall|gather|scatter|sendrecv --baseline gloo,mpi` over shared memory at
  2, 4 and 8 ranks; the calibrated model's all-to-all pick against the fastest measured, and the
  Bruck/pairwise crossover, on real ranks and in the simulator to 1024 ranks (`alltoall_results`).
- simulator.md: one `calibrate`, `--rounds` rounds of `bench allreduce` at 2-8 ranks over ipc and
  shm, and `simulate --link calibration.json --measured ...`: every row simulated from the one
  calibration beside its measured median, the rows within 25% and 2x, a plot; and the simulator's own
  cost at 1024 ranks (accuracy.py). Long: `--continue` and `--max-minutes` measure it in pieces.
- labs.md: `lecture`: every lab's tables beside the lecture's figures and the models.
- training.md: `run train` as a user types it (its wall time, loss and how lecture-like its sample
  is, beside the same run at a constant learning rate); `run train-modes --baseline ddp` (and
  train-large) at 2 and 4 ranks, alternating round by round: our bucketed step against PyTorch
  DDP's; then tokens/s at 1, 2, 4 ranks and across two emulated hosts (as root).
- compute.md: `bench compute`: forward + backward of one rank's shapes of train-modes and train-large
  at 1, 2 and 4 ranks, ours (native kernels, numpy reference) against torch's model, alternating
  rounds; the optimizer step; each kernel's share and the achieved FLOP/s against the machine's
  matrix-multiply rate (compute_bench.py); its processes run without OPENBLAS_CORETYPE/L2_SIZE.
- steptime.md: `run train-modes` at 2 and 4 ranks, every mode's measured step beside the step-time
  model's from the calibration, the ratio per mode and rank count (`steptime_results`); then ZeRO-2
  and ZeRO-3's trade: every mode with and without prefetch beside the model, the two pathologies (no
  unit wrapping, ZeRO-2 with accumulation), ZeRO-3 against FSDP2, and the simulator's answer to
  where ZeRO-3 stops paying (`sharding_results`).
- serving.md: the KV-cache server serving a model: the attention kernel paged vs
  contiguous at two row sizes, decode throughput vs batch beside the decode-step model, `run train`
  then `run serving` (the trained model's text, the steps' split, paging's gain predicted and
  measured), paging's throughput on a weight-bound model (serving-throughput), n samples forked vs
  copied, a shared system prompt with prefix caching; then `serve` under Poisson load (`bench
  serving`: latency against load, the knee beside M/D/1 and the batched model), chunked prefill
  against prefill-first (`bench serving --workload mixed`), speculative decoding (`bench speculative`).
- parallelism.md: `run train-pipeline` at 2 and 4 stages, GPipe and 1F1B over 1-16 micro-batches:
  the bubble against its formula and model, the activations held against theirs, torch's
  pipelining schedules beside ours (`parallelism_results`).
- tensor.md: `run serving-tensor` at 2 and 4 ranks (decode step time against t, measured, modelled
  and simulated to 64 ranks) and `run train-tensor` at 2 and 4 ranks with torch's tensor parallelism
  beside ours (`tensor_results`).
- moe.md: `run train-moe` on 2 ranks (dropless) and 4 (2 x 2, capacity factor 1.25): loads and drops
  per routing workload, the step's split beside the all-to-all model and the slowest rank's work, the
  permutation sorted against gathered (`moe_results`).
- chaos.md: `chaos` in pieces of fixed seeds (with `--hosts` as root): root causes, leaks, exits,
  detection times by fault kind; then `chaos --recover` in pieces: each run's history (requests
  answered once, run again, twice, never, differing) and the time to recover, by fault kind
  (`chaos/results.py`; `--continue` and `--max-minutes` as above).
- recovery.md: `run train-recovery`: a checkpoint's stall, synchronous against asynchronous; goodput
  against the checkpoint interval under a drill that kills a rank at random, beside its model with
  Young/Daly's optimum marked; each way to recover timed phase by phase (`recovery_results`).
- observability.md: the flight recorder's cost on an 8-byte all-reduce, off against on
  (`commands/flight_bench.py`), and the straggler scores' hits, misses and false positives over
  clean and slowed runs (`commands/straggler_bench.py`).

The pages with model columns (collectives, alltoall, labs, steptime, parallelism) read one calibration:
the default one (PLAYGROUND_CALIBRATION or ./calibration.json) if it fits this machine, else one that
`calibrate` measures first into the work directory (`calibration_for_models`); each page says which.

The subcommands run as children (`python -P -m playground ...`, as a user would type them), so a
crash in one is one failed section, named on the page, not a lost run.
"""

import argparse
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from playground.chaos.results import chaos_section
from playground.commands import accuracy, alltoall_results, recovery_results
from playground.commands.compute_bench import compute_section
from playground.commands.moe_results import moe
from playground.commands.observability_results import observability_section
from playground.commands.parallelism_results import parallelism
from playground.commands.steptime_results import steptime_section
from playground.commands.tensor_results import tensor
from playground.commands.training_results import training_section
from playground.core import flags
from playground.core.child import PLAYGROUND
from playground.core.errors import ScenarioError
from playground.core.flags import Text
from playground.core.machine import describe_machine
from playground.core.rundir import EXIT_FAILED, EXIT_OK, make_run_dir
from playground.models.calibration import ENVIRONMENT, find_calibration


@dataclass
class Section:
    name: str
    page: str
    title: str
    make: Callable  # (ctx) -> markdown body; raises on failure
    quick_minutes: float
    full_minutes: float
    models: bool = False  # its model columns read this machine's calibration


class Context:
    """What a section needs: where to put its runs, whether quick, how to run a child command."""

    def __init__(
        self,
        work: Path,
        quick: bool,
        rounds: int,
        console: Console,
        out: Path,
        max_minutes: float | None = None,
    ):
        self.work, self.quick, self.rounds, self.console = work, quick, rounds, console
        self.out, self.max_minutes = out, max_minutes
        self.commands: list[str] = []

    def out_of_time(self, started: float) -> bool:
        """Past `--max-minutes` since `started` (time.monotonic()): start no new piece."""
        return self.max_minutes is not None and time.monotonic() - started > 60 * self.max_minutes

    def run(self, *args: str, timeout_s: float = 3600, ok=(EXIT_OK,)) -> subprocess.CompletedProcess:
        """`python -m playground ARGS` as a child, its output shown as it goes; recorded for the page.
        An exit status not in `ok` fails the section."""
        line = "python -m playground " + " ".join(args)
        self.commands.append(line)
        self.console.print(f"[bold]$ {escape(line)}[/bold]", highlight=False)
        proc = subprocess.run([*PLAYGROUND, *args], text=True, stdout=subprocess.PIPE, timeout=timeout_s)
        self.console.print(proc.stdout[-3000:], highlight=False, markup=False)
        if proc.returncode not in ok:
            raise ScenarioError(f"`{line}` exited with {proc.returncode}")
        return proc

    def latest(self, runs: Path) -> Path:
        return (runs / "latest").resolve()


def _collectives(ctx: Context) -> str:
    runs = ctx.work / "table"
    args = ["bench", "table", "--out", str(runs)]
    if ctx.quick:
        args += ["--rounds", "1", "--rank-counts", "2,4", "--sizes", "8,1MiB"]
    else:
        args += ["--rounds", str(ctx.rounds)]
    ctx.run(*args, timeout_s=7200)
    return (ctx.latest(runs) / "table.md").read_text()


def _labs(ctx: Context) -> str:
    runs = ctx.work / "lecture"
    ctx.run("lecture", "--out", str(runs), *(["--quick"] if ctx.quick else []), timeout_s=3600)
    return _without_local_images((ctx.latest(runs) / "summary.md").read_text())


def _without_local_images(summary: str) -> str:
    """The lecture's summary without its plots: they live beside its own page in the run directory,
    which the docs do not hold (the site's strict build would fail on the links)."""
    lines = [
        line for line in summary.splitlines() if not re.fullmatch(r"!\[[^]]*\]\((?!https?:)[^)]*\)", line)
    ]
    if len(lines) < len(summary.splitlines()):
        lines += ["", "(The plots are on the lecture's own page, `index.html` in the run directory above.)"]
    return "\n".join(lines) + "\n"


def _serving(ctx: Context) -> str:
    runs, parts = ctx.work / "serving", []
    quick = {
        "paged-attention": ["params.contexts=[512,4096]", "params.block_sizes=[16,64]", "params.rounds=2"],
        "serving-batch": ["params.batch_sizes=[1,8,64]", "params.new_tokens=16"],
        "serving": ["params.num_requests=200"],
        "serving-throughput": ["params.num_requests=40"],
        "serving-samples": ["params.policies=[paged,reserve_max]"],
        "serving-prefix": ["params.num_requests=32"],
    }
    full = {"paged-attention": [f"params.rounds={max(5, ctx.rounds)}"]}
    steps = [
        ("The attention kernel, rows of 8 heads x 64 (a layer of train-large)", "paged-attention", []),
        (
            "The attention kernel, rows of 4 heads x 16 (the served model)",
            "paged-attention",
            ["params.heads=4", "params.head_dim=16"],
        ),
        ("Decode throughput vs batch (25M parameters)", "serving-batch", []),
        ("run train, then run serving: the trained model served", "serving", []),
        ("Paging's throughput: the lecture's 4.6 requests on a weight-bound model", "serving-throughput", []),
        ("n samples of one prompt: forked vs copies", "serving-samples", []),
        ("A shared system prompt, prefix caching off and on", "serving-prefix", []),
    ]
    for title, scenario, extra in steps:
        if scenario == "serving":  # `run serving` serves what the last `run train` beside it saved
            ctx.run("run", "train", "--out", str(runs), timeout_s=3600)
        sets = [*(quick if ctx.quick else full).get(scenario, []), *extra]
        ctx.run("run", scenario, "--out", str(runs), *(a for s in sets for a in ("--set", s)), timeout_s=3600)
        parts.append(f"## {title}\n\n" + result_markdown(ctx.latest(runs)))
    parts += _serving_load(ctx, runs)
    return "\n".join(parts)


def _serving_load(ctx: Context, runs: Path) -> list[str]:
    """The trained model over HTTP under Poisson load (the knee beside the queueing models), chunked
    prefill against prefill-first on long and short prompts, speculative decoding at batch 1-16."""
    requests = ["--requests", "20"] if ctx.quick else []
    steps = [
        ("The trained model over HTTP under Poisson load: latency against load", ["serving", *requests]),
        (
            "Chunked prefill against prefill-first: long and short prompts mixed",
            ["serving", "--workload", "mixed", *requests],
        ),
        (
            "Speculative decoding (prompt lookup) at batch 1, 4, 16",
            ["speculative", "--iters", str(ctx.rounds)],
        ),
    ]
    parts = []
    for title, args in steps:
        ctx.run("bench", *args, "--out", str(runs), timeout_s=3600)
        parts.append(f"## {title}\n\n" + result_markdown(ctx.latest(runs)))
    return parts


PAGE_COLUMNS = 110  # characters of a table on a results page (the page is 1440 px wide at most)


def result_markdown(run_dir: Path) -> str:
    """A run's tables and notes as markdown (what its summary printed); a table too wide for the
    page is cut into parts as the terminal cuts it, its legend under its last part."""
    from playground.display.report import Table, format_cell, legend_lines, table_parts

    result = json.loads((run_dir / "result.json").read_text())
    out = []
    for t in result.get("tables") or []:
        if not t["rows"]:
            continue
        table = Table.from_dict(t)
        columns = table.columns or {k: k for k in table.rows[0]}
        for part in table_parts(table, PAGE_COLUMNS):
            out += [
                f"**{part.title}**\n",
                "| " + " | ".join(columns[k] for k in part.keys) + " |",
                "|" + "---|" * len(part.keys),
            ]
            out += ["| " + " | ".join(format_cell(r.get(k)) for k in part.keys) + " |" for r in table.rows]
            out.append("")
        out += [f"*{line.partition(': ')[0]}*: {line.partition(': ')[2]}  " for line in legend_lines(table)]
        out += [""] if table.legend else []
    out += [f"- {n}" for n in result.get("notes") or []]
    return "\n".join(out) + "\n"


SECTIONS = [
    Section("collectives", "collectives.md", "Collectives against Gloo and MPICH", _collectives, 2, 12, True),
    Section(
        "alltoall",
        "alltoall.md",
        "All-to-all, gather, scatter and send/recv against Gloo, MPICH and the model",
        alltoall_results.section,
        5,
        45,
        True,
    ),
    Section("simulator", "simulator.md", "The simulator against measurements", accuracy.section, 3, 40),
    Section("labs", "labs.md", "The labs beside the lecture", _labs, 1.5, 3, True),
    Section("training", "training.md", "Data-parallel training against PyTorch DDP", training_section, 3, 12),
    Section("compute", "compute.md", "A training rank's compute against PyTorch", compute_section, 1.5, 5),
    Section("steptime", "steptime.md", "The training step against its model", steptime_section, 4, 25, True),
    Section("serving", "serving.md", "Serving a model from the paged KV cache", _serving, 5, 20),
    Section(
        "parallelism",
        "parallelism.md",
        "Pipeline parallelism against its formulas",
        parallelism,
        1.5,
        4,
        True,
    ),
    # (tensor measures a calibration of its own and names it to its runs)
    Section("tensor", "tensor.md", "Tensor parallelism against its model and the simulator", tensor, 1.5, 4),
    # (moe measures a calibration of its own and names it to its runs)
    Section("moe", "moe.md", "Mixture of experts: expert parallelism under skewed routing", moe, 1.5, 4),
    Section("chaos", "chaos.md", "Faults nobody chose: drawn runs, one fault each", chaos_section, 2, 17),
    Section(
        "recovery",
        "recovery.md",
        "Recovery: checkpoints, restarts and goodput",
        recovery_results.section,
        2,
        8,
    ),
    Section(
        "observability",
        "observability.md",
        "The flight recorder's cost, and stragglers named",
        observability_section,
        1,
        12,
    ),
]


def calibration_for_models(ctx: Context) -> str:
    """Make the calibration the model columns read this machine's: the default one if it fits, else
    one measured now into the work directory and named to the children (PLAYGROUND_CALIBRATION).
    The line the pages say it with."""
    try:
        found = find_calibration()
    except ScenarioError as e:  # another machine's or version's: measure this one's
        ctx.console.print(f"{e}; calibrating anew", highlight=False, markup=False)
        found = None
    if found is not None:
        where = Path(found.path).resolve()
        shown = where.relative_to(Path.cwd()) if where.is_relative_to(Path.cwd()) else where
        return f"Model columns: the calibration {shown} (measured {found.record.get('date', '?')})."
    path = ctx.work / "calibration.json"
    try:
        ctx.work.mkdir(parents=True, exist_ok=True)
        ctx.run(
            "calibrate",
            "--out",
            str(path),
            "--work",
            str(ctx.work / "runs"),
            *(["--rounds", "1"] * ctx.quick),
        )
    except (ScenarioError, subprocess.TimeoutExpired, OSError) as e:
        return f"Model columns: no calibration ({e}): the labelled rough defaults."
    os.environ[ENVIRONMENT] = str(path.resolve())
    return "Model columns: the calibration measured first (`calibrate` above)."


def machine_header(commands: list[str], started: float, loads: tuple[float, float]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in describe_machine().items())
    cmds = "\n".join(commands)
    return (
        f"Measured on {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))} in "
        f"{(time.time() - started) / 60:.1f} min; load average {loads[0]:.1f} before, {loads[1]:.1f} after.\n\n"
        f"| machine | |\n|---|---|\n{rows}\n\n"
        f"```bash\n{cmds}\n```\n"
    )


# MkDocs Material's front matter on every results page: no table of contents beside the tables of
# figures, which then get the page's whole width (docs/stylesheets/extra.css widens the page itself).
PAGE_FRONT = "---\nhide:\n  - toc\n---\n\n"


@dataclass(frozen=True)
class ResultsConfig:
    """Which pages to measure, how (quick or full, rounds), where they go and where their runs go."""

    sections: tuple[Section, ...]
    quick: bool
    rounds: int
    out: Path  # the pages
    work: Path  # the runs behind them
    resume: bool  # go on in the last results directory under `work`
    max_minutes: float | None

    @classmethod
    def from_flags(
        cls,
        *,
        sections: Text | None = None,
        quick: bool = False,
        rounds: int = 3,
        out: str | Path = "docs/results",
        work: str | Path = "runs",
        resume: bool = False,
        max_minutes: float | None = None,
    ) -> "ResultsConfig":
        names = flags.items(sections)
        unknown = set(names) - {s.name for s in SECTIONS}
        if unknown:
            raise ScenarioError(
                f"--sections {','.join(sorted(unknown))}: allowed: {', '.join(s.name for s in SECTIONS)}"
            )
        if rounds < 1:
            raise ScenarioError(f"--rounds {rounds}: expected at least 1")
        if max_minutes is not None and not max_minutes > 0:
            raise ScenarioError(f"--max-minutes {max_minutes}: expected minutes > 0")
        chosen = tuple(s for s in SECTIONS if not names or s.name in names)
        return cls(chosen, quick, rounds, Path(out), Path(work), resume, max_minutes)


def run_results(config: ResultsConfig) -> int:
    """Each chosen section measured and its page written, then the index; 1 if a section failed."""
    console = Console(stderr=True, highlight=False)
    chosen, quick = config.sections, config.quick
    minutes = sum(s.quick_minutes if quick else s.full_minutes for s in chosen)
    console.print(
        f"results: {', '.join(s.name for s in chosen)}: about {minutes:.0f} min here; keep the machine quiet"
    )
    config.out.mkdir(parents=True, exist_ok=True)
    earlier = sorted(p for p in config.work.glob("*-results*") if p.is_dir()) if config.resume else []
    work_dir = earlier[-1] if earlier else make_run_dir(config.work, "results")
    named = os.environ.get(ENVIRONMENT)
    models = Context(work_dir / "calibration", quick, config.rounds, console, config.out, config.max_minutes)
    try:
        models_line = calibration_for_models(models) if any(s.models for s in chosen) else ""
        failed = [
            s for k, s in enumerate(chosen) if not _page(config, k, work_dir, models, models_line, console)
        ]
    finally:
        if named is None:
            os.environ.pop(ENVIRONMENT, None)
        else:
            os.environ[ENVIRONMENT] = named
    _write_index(config.out)
    return EXIT_FAILED if failed else EXIT_OK


def _page(config: ResultsConfig, k: int, work_dir: Path, models: Context, models_line: str, console) -> bool:
    """Section k measured and its page written (saying so if it failed); whether it succeeded."""
    s = config.sections[k]
    console.print(f"[bold]({k + 1}/{len(config.sections)}) {s.title}[/bold]")
    ctx = Context(work_dir / s.name, config.quick, config.rounds, console, config.out, config.max_minutes)
    started, load0 = time.time(), os.getloadavg()[0]
    ok = True
    try:
        body = s.make(ctx)
    except (ScenarioError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
        ok = False
        body = f"This section failed: {e}. Rerun `python -m playground results --sections {s.name}`.\n"
    commands = [*models.commands, *ctx.commands] if s.models else ctx.commands
    header = machine_header(commands, started, (load0, os.getloadavg()[0]))
    if s.models:
        header += f"\n{models_line}\n"
    (config.out / s.page).write_text(as_typed(f"{PAGE_FRONT}# {s.title}\n\n{header}\n{body}", work_dir))
    console.print(f"written: {config.out / s.page}")
    return ok


def as_typed(text: str, work_dir: Path) -> str:
    """`text` (a page) with every path inside the results directory written relative to it: the
    commands as a reader types them there (`--out labs/lecture`), not where this machine happened
    to put them."""
    for prefix in {str(work_dir), str(work_dir.resolve())}:
        text = text.replace(prefix + os.sep, "")
    return text


def _write_index(out: Path) -> None:
    pages = [(s, out / s.page) for s in SECTIONS]
    lines = [
        "# Results on one machine\n",
        "Written by `python -m playground results` (this machine's figures, nothing typed by hand); each "
        "page says the machine, the commands and how busy the machine was. Run it on a quiet machine: "
        "it measures the machine it is on.\n",
    ]
    for s, path in pages:
        lines.append(f"- [{s.title}]({s.page})" if path.exists() else f"- {s.title}: not measured yet")
    (out / "index.md").write_text("\n".join(lines) + "\n")


HELP = "measure the docs' results pages on this machine (benchmarks, simulator, labs)"
DESCRIPTION = (
    "Runs bench table, the all-to-all family against Gloo, MPICH and the model, the simulator against "
    "measurements, the lecture, training against PyTorch DDP, a training rank's compute against torch's, the "
    "training step against its model with ZeRO-2 and ZeRO-3's trade, the serving lab, pipeline and tensor parallelism, the mixture of "
    "experts, chaos runs and recovery (checkpoints, restarts, goodput), the flight recorder's cost with the "
    "straggler scores' hits, one after the other, and writes docs/results/*.md headed by this machine; "
    "about 190 min (--quick: 32)."
)


def add_results_flags(r: argparse.ArgumentParser) -> None:
    """`results`' flags; their defaults are `ResultsConfig.from_flags`'."""
    r.add_argument(
        "--sections",
        metavar="collectives,alltoall,simulator,labs,training,compute,steptime,serving,parallelism,tensor,moe,chaos,recovery,observability",
        help="only these pages",
    )
    r.add_argument("--quick", action="store_true", help="fewer sizes, rank counts and rounds: a smoke run")
    r.add_argument("--rounds", type=int, help="rounds of each measurement (default 3)")
    r.add_argument("--out", help="where the pages go (default docs/results)")
    r.add_argument("--work", help="where the runs behind them go (default runs)")
    r.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="go on in the last results directory under --work: pieces already measured are kept",
    )
    r.add_argument(
        "--max-minutes", type=float, help="start no new piece after this long (the page says what is missing)"
    )
