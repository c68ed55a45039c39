"""`python -m playground chaos [--runs N] [--seed S] [--hosts] [--only K]`: faults nobody chose.

Short runs, each a workload drawn at random (collectives over each transport, buckets, training,
serving, the KV-cache lab, the standalone KV server with client processes), its rank count and size
drawn too, and one fault fired at a random moment, from inside (the scenario's fault keys: raise,
kill, exit, hang, corrupt) or from outside (SIGKILL or SIGSTOP to a rank, the launcher's Ctrl-C,
SIGTERM or SIGKILL, a KV client killed mid-request, the KV server killed or restarted); with
`--hosts` also a cut link, a killed host, a delayed link between emulated hosts. Jepsen's nemesis
does the same to a database; torchelastic's agent tests and NCCL's watchdog check the same things
of a training job.

Every run is judged (chaos_checks.py): the exit status is the documented one, the root cause names
the faulty rank and its host, the logs hold what was written before the fault, nothing is left
behind; and the time from the fault to the first error and to the exit is measured. One table by
fault kind, `chaos.json` in the run directory, exit 1 naming each failed run with the command that
replays it (`--seed S --only K`). Runs are a function of the seed and their number alone.
"""

import json
import random
import time
from pathlib import Path

from playground.commands import chaos_exec, chaos_kvserver, chaos_report
from playground.commands.chaos_checks import cluster_state, judge
from playground.commands.chaos_plan import draw, replay_command
from playground.core.errors import ScenarioError
from playground.core.machine import describe_machine
from playground.core.rundir import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, make_run_dir
from playground.display.report import make_console, progress_bar, render_table
from playground.hosts import netns


def add_chaos_parser(sub, func) -> None:
    c = sub.add_parser(
        "chaos",
        help="short runs with faults fired at random moments; checks exits, root causes, leaks, timing",
        description=__doc__.split("\n\n")[1],
    )
    c.add_argument("--runs", type=int, default=20, metavar="N", help="how many runs (default 20)")
    c.add_argument(
        "--seed", type=int, metavar="S", help="the seed of the draws (default: a random one, printed)"
    )
    c.add_argument(
        "--hosts", action="store_true", help="run on emulated hosts and add host faults (needs root)"
    )
    c.add_argument("--only", type=int, metavar="K", help="only run K of the seed (to replay a failed one)")
    c.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    c.set_defaults(func=func)


def check_args(args) -> None:
    if args.runs < 1:
        raise ScenarioError(f"--runs {args.runs}: expected at least 1")
    if args.only is not None and args.only < 1:
        raise ScenarioError(f"--only {args.only}: expected a run number, 1 or more")
    if args.seed is not None and args.seed < 0:
        raise ScenarioError(f"--seed {args.seed}: expected 0 or more")
    if args.hosts:
        netns.check_can_emulate()  # one line, exit 2, before anything is made


def run_chaos(args) -> int:
    check_args(args)
    seed = args.seed if args.seed is not None else random.randrange(1, 100_000)
    indices = [args.only] if args.only is not None else list(range(1, args.runs + 1))
    console, err = make_console(), make_console(stderr=True)
    run_dir = make_run_dir(Path(args.out), "chaos")
    command = " ".join(
        ["python -m playground chaos", f"--seed {seed}"]
        + ([f"--only {args.only}"] if args.only is not None else [f"--runs {args.runs}"])
        + (["--hosts"] if args.hosts else [])
    )
    console.print(
        f"[bold]chaos[/bold]: {len(indices)} runs, seed {seed}{', emulated hosts' if args.hosts else ''} -> {run_dir}",
        highlight=False,
    )
    summary = {
        "command": command,
        "seed": seed,
        "hosts": args.hosts,
        "machine": describe_machine(),
        "records": [],
    }
    started = time.monotonic()
    interrupted = False
    try:
        with progress_bar(err) as progress:
            task = progress.add_task("chaos", total=len(indices))
            for k in indices:
                run = draw(seed, k, args.hosts)
                progress.update(task, description=run.describe())
                record = _one(run, run_dir / f"run-{k:03d}", args.hosts)
                summary["records"].append(record)
                summary["elapsed_s"] = round(time.monotonic() - started, 1)
                _write(run_dir, summary)
                if not record["verdict"]["ok"]:
                    err.print(
                        f"[bold red]FAILED[/bold red] {chaos_report.failed_lines([record])[0]}",
                        highlight=False,
                    )
                progress.advance(task)
    except KeyboardInterrupt:
        interrupted = True  # the run in progress was stopped by its own finally (its sessions killed)
    records = summary["records"]
    summary["table"] = chaos_report.rows(records)
    summary["interrupted"] = interrupted
    _write(run_dir, summary)
    if records:
        render_table(chaos_report.table(records, f"chaos: {len(records)} runs, seed {seed}"), console)
    failed = [r for r in records if not r["verdict"]["ok"]]
    console.print(
        f"{len(records)} runs in {time.monotonic() - started:.0f}s: {len(failed)} failed, "
        f"{sum(r['verdict']['missed'] for r in records)} missed (the run ended before its fault); "
        f"{run_dir / 'chaos.json'}",
        highlight=False,
    )
    for line in chaos_report.failed_lines(failed):
        err.print(f"[bold red]FAILED[/bold red] {line}", highlight=False)
    if interrupted:
        err.print("interrupted: the run in progress was stopped", highlight=False)
        return EXIT_INTERRUPTED
    return EXIT_FAILED if failed else EXIT_OK


def _one(run, out_dir: Path, hosts: bool) -> dict:
    before = cluster_state() if run.hosts else {}
    execute = chaos_kvserver.execute if run.workload == "kvserver" else chaos_exec.execute
    obs = execute(run, out_dir)
    verdict = judge(run, obs, before)
    return {
        "run": run.to_dict(),
        "describe": run.describe(),
        "verdict": verdict.to_dict(),
        "replay": replay_command(run.seed, run.index, hosts),
        "notes": obs.notes,
        "run_dir": str(obs.run_dir or out_dir),
    }


def _write(run_dir: Path, summary: dict) -> None:
    (run_dir / "chaos.json").write_text(json.dumps(summary, indent=1))
