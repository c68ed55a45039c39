"""`python -m playground chaos [--runs N] [--seed S] [--hosts] [--only K]`: faults nobody chose.

Short runs, each a workload drawn at random (collectives over each transport, buckets, training,
serving, the KV-cache lab, the standalone KV server with client processes), its rank count and size
drawn too, and one fault fired at a random moment, from inside (the scenario's fault keys: raise,
kill, exit, hang, corrupt) or from outside (SIGKILL or SIGSTOP to a rank, the launcher's Ctrl-C,
SIGTERM or SIGKILL, a KV client killed mid-request, the KV server killed or restarted); with
`--hosts` also a cut link, a killed host, a delayed link between emulated hosts. Jepsen's nemesis
does the same to a database; torchelastic's agent tests and NCCL's watchdog check the same things
of a training job.

Every run is judged (checks.py): the exit status is the documented one, the root cause names
the faulty rank and its host, the logs hold what was written before the fault, nothing is left
behind; and the time from the fault to the first error and to the exit is measured. One table by
fault kind, `chaos.json` in the run directory, exit 1 naming each failed run with the command that
replays it (`--seed S --only K`). Runs are a function of the seed and their number alone.

With `--recover` the faults must be mended, not only named (recovered.py): the workloads a restart
mends run with one restart allowed (the standalone KV server is started again on its address), and
each run is checked as a history: ended with status 0 after a restart naming the faulty rank,
nothing done twice, nothing never done, nothing different from a fault-free run; the table counts
those by fault kind, with the time to recover. `--recover --hosts` puts the launched workloads on
emulated hosts and adds the host faults: the restarted group runs on mended links, the drill not
fired again.
"""

import argparse
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from playground.chaos import report as chaos_report
from playground.chaos.checks import cluster_state, judge
from playground.chaos.kinds import ChaosRun
from playground.chaos.plan import draw, replay_command
from playground.core.errors import ScenarioError
from playground.core.machine import describe_machine
from playground.core.rundir import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, make_run_dir
from playground.display.report import make_console, progress_bar, render_table
from playground.hosts import netns

HELP = "short runs with faults fired at random moments; checks exits, root causes, leaks, timing"
DESCRIPTION = (__doc__ or "").split("\n\n")[1]


def add_chaos_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument("--runs", type=int, metavar="N", help="how many runs (default 20)")
    c.add_argument(
        "--seed", type=int, metavar="S", help="the seed of the draws (default: a random one, printed)"
    )
    c.add_argument(
        "--hosts", action="store_true", help="run on emulated hosts and add host faults (needs root)"
    )
    c.add_argument("--only", type=int, metavar="K", help="only run K of the seed (to replay a failed one)")
    c.add_argument(
        "--recover",
        action="store_true",
        help="faults a restart must mend: each run restarted and checked as a history (nothing lost or twice)",
    )
    c.add_argument("--out", help="directory for run directories (default: runs)")


@dataclass(frozen=True)
class ChaosConfig:
    """The runs to draw and judge: `indices` of `seed` (drawn once, if not given), on emulated hosts
    or not, into `out`."""

    seed: int
    indices: tuple[int, ...]
    hosts: bool
    out: Path
    command: str  # the command line that does these runs again
    recover: bool = False  # the faults must be mended: runs restarted, checked as histories

    @classmethod
    def from_flags(
        cls,
        *,
        runs: int = 20,
        seed: int | None = None,
        hosts: bool = False,
        only: int | None = None,
        out: str | Path = "runs",
        recover: bool = False,
    ) -> "ChaosConfig":
        if runs < 1:
            raise ScenarioError(f"--runs {runs}: expected at least 1")
        if only is not None and only < 1:
            raise ScenarioError(f"--only {only}: expected a run number, 1 or more")
        if seed is not None and seed < 0:
            raise ScenarioError(f"--seed {seed}: expected 0 or more")
        if hosts:
            netns.check_can_emulate()  # one line, exit 2, before anything is made
        seed = seed if seed is not None else random.randrange(1, 100_000)
        indices = (only,) if only is not None else tuple(range(1, runs + 1))
        command = " ".join(
            ["python -m playground chaos", f"--seed {seed}"]
            + ([f"--only {only}"] if only is not None else [f"--runs {runs}"])
            + (["--hosts"] if hosts else [])
            + (["--recover"] if recover else [])
        )
        return cls(seed, indices, hosts, Path(out), command, recover)


def run_chaos(config: ChaosConfig) -> int:
    """Every run drawn, run and judged, chaos.json written after each; the table and the failed runs."""
    console, err = make_console(), make_console(stderr=True)
    run_dir = make_run_dir(config.out, "chaos")
    where = (", emulated hosts" if config.hosts else "") + (", recovering" if config.recover else "")
    console.print(
        f"[bold]chaos[/bold]: {len(config.indices)} runs, seed {config.seed}{where} -> {run_dir}",
        highlight=False,
    )
    summary: dict = {
        "command": config.command,
        "seed": config.seed,
        "hosts": config.hosts,
        "recover": config.recover,
        "machine": describe_machine(),
        "records": [],
    }
    started = time.monotonic()
    interrupted = _runs(config, run_dir, summary, started, err)
    records = summary["records"]
    summary["table"] = chaos_report.rows(records, config.recover)
    summary["interrupted"] = interrupted
    _write(run_dir, summary)
    if records:
        title = f"chaos{' --recover' if config.recover else ''}: {len(records)} runs, seed {config.seed}"
        render_table(chaos_report.table(records, title, config.recover), console)
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


def _runs(config: ChaosConfig, run_dir: Path, summary: dict, started: float, err) -> bool:
    """Each run in turn, its record added to `summary` and written at once; True if Ctrl-C stopped them."""
    try:
        with progress_bar(err) as progress:
            task = progress.add_task("chaos", total=len(config.indices))
            for k in config.indices:
                run = draw(config.seed, k, config.hosts, config.recover)
                progress.update(task, description=run.describe())
                record = _one(run, run_dir / f"run-{k:03d}", config.hosts)
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
        return True  # the run in progress was stopped by its own finally (its sessions killed)
    return False


def _one(run: ChaosRun, out_dir: Path, hosts: bool) -> dict:
    before = cluster_state() if run.hosts else {}
    obs = run.workload.execute(run, out_dir)
    verdict = judge(run, obs, before)
    return {
        "run": run.to_dict(),
        "describe": run.describe(),
        "verdict": verdict.to_dict(),
        "replay": replay_command(run.seed, run.index, hosts, run.recover),
        "notes": obs.notes,
        "run_dir": str(obs.run_dir or out_dir),
    }


def _write(run_dir: Path, summary: dict) -> None:
    (run_dir / "chaos.json").write_text(json.dumps(summary, indent=1))
