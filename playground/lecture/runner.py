"""Run the lecture's scenarios one at a time, each through the real CLI, under one progress bar.

Each scenario is `python -m playground run NAME --out LECTURE_DIR/runs --set ...` in a child
process, exactly what the page tells a user to type, so every table and plot comes from a real
run and a scenario that crashes (or hangs past its limit) cannot take the lecture down with it.
They measure this machine, so never two at once. Ctrl-C reaches the running scenario (it is in
our process group; we pass it on if it was sent to us alone), which stops its ranks cleanly.

Ctrl-C stops the lecture whenever it comes, and is never read as a scenario's failure:
- our own SIGINT handler only raises a flag (`_CtrlC`), checked before each scenario starts and
  while one runs, so it cannot be lost in the middle of starting a child or drawing the bar, and it
  is installed even when we inherited SIGINT ignored (a background job of a non-interactive shell,
  a CI step): the scenario's launcher installs its own handler all the same, so it would stop on
  Ctrl-C while we, ignoring it, read its status 130 as a failure and went on to the next one;
- a scenario that exits 130 (its launcher stopped its ranks on Ctrl-C) or dies of SIGINT (it came
  while its interpreter was starting, before any handler) was interrupted, not failed, and stops
  the lecture too, even when the signal reached it and not us.
"""

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from playground.core.child import PLAYGROUND, subprocess_env
from playground.lecture.plan import ScenarioRun, Section

_CHILD = [*PLAYGROUND, "run"]  # the package we were imported from (core/child.py)
GRACE_S = 15.0  # after Ctrl-C or a time limit, how long a scenario may take to stop its ranks


@dataclass
class Outcome:
    """What happened to one scenario of the lecture."""

    section: int
    run: ScenarioRun
    command: str
    exit_code: int | None = None  # None: not run (an earlier Ctrl-C)
    elapsed_s: float = 0.0
    run_dir: Path | None = None
    log: Path | None = None  # the scenario's terminal output (stdout and stderr)
    error: str = ""
    ctrl_c: bool = False  # Ctrl-C stopped it (whatever status it then exited with)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def interrupted(self) -> bool:
        return self.ctrl_c

    @property
    def failed(self) -> bool:
        """Ran and did not succeed; stopped by Ctrl-C is not a failure of the scenario."""
        return self.exit_code is not None and not self.ok and not self.interrupted


class _CtrlC:
    """SIGINT counts presses instead of raising KeyboardInterrupt while installed (`with`); the
    previous disposition, SIG_IGN included, comes back at the end."""

    def __init__(self):
        self.presses = 0

    @property
    def pressed(self) -> bool:
        return self.presses > 0

    def __call__(self, signum, frame) -> None:
        self.presses += 1

    def __enter__(self) -> "_CtrlC":
        self._previous = signal.signal(signal.SIGINT, self)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)


def _stopped_by_sigint(exit_code: int | None) -> bool:
    """The scenario's own status says Ctrl-C stopped it: its launcher's 130, or killed by SIGINT."""
    return exit_code in (130, -signal.SIGINT)


def _child_env() -> dict:
    return subprocess_env({"COLUMNS": os.environ.get("COLUMNS", "200")})


def _stop(proc: subprocess.Popen, sig: int) -> None:
    """Ask the scenario to stop (its launcher stops every rank), then kill it if it will not."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _error_text(outcome: Outcome, result_failures: list[str]) -> str:
    if result_failures:
        return "\n".join(result_failures[:4])
    if outcome.log and outcome.log.is_file():
        lines = [ln for ln in outcome.log.read_text(errors="replace").splitlines() if ln.strip()]
        return "\n".join(lines[-8:])
    return f"exit status {outcome.exit_code}"


class LectureRunner:
    """Runs the selected sections' scenarios in order; `run()` returns (outcomes, interrupted)."""

    def __init__(self, sections: tuple[Section, ...], quick: bool, lecture_dir: Path, console: Console):
        self.sections = sections
        self.quick = quick
        self.runs_dir = lecture_dir / "runs"
        self.logs_dir = lecture_dir / "logs"
        self.console = console
        self.outcomes = [Outcome(s.number, run, run.command(quick)) for s in sections for run in s.scenarios]
        self.ctrl_c = _CtrlC()

    def _expected(self, o: Outcome) -> float:
        return o.run.expected_s.quick if self.quick else o.run.expected_s.full

    def _left_s(self, index: int, current_s: float) -> float:
        """Expected seconds still to go, scaled by how this machine has done so far."""
        done = self.outcomes[:index]
        expected_done = sum(self._expected(o) for o in done)
        speed = (sum(o.elapsed_s for o in done) / expected_done) if expected_done > 0 else 1.0
        speed = min(max(speed, 0.5), 3.0)
        later = sum(self._expected(o) for o in self.outcomes[index + 1 :]) * speed
        return later + max(self._expected(self.outcomes[index]) * speed - current_s, 0.0)

    def run(self) -> tuple[list[Outcome], bool]:
        with self.ctrl_c:
            return self._run_all()

    def _run_all(self) -> tuple[list[Outcome], bool]:
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        total = sum(self._expected(o) for o in self.outcomes)
        titles = {s.number: s.title for s in self.sections}
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[step]}"),
            TimeElapsedColumn(),
            TextColumn("left ~{task.fields[left]}"),
            console=self.console,
            transient=True,
        ) as progress:
            task = progress.add_task("lecture", total=total, step="", left=f"{total:.0f} s")
            done_expected = 0.0
            for k, o in enumerate(self.outcomes):
                if self.ctrl_c.pressed:  # between two scenarios: the next one never starts
                    return self.outcomes, True
                label = f"§{o.section} {titles[o.section]} · {o.run.key}"

                def tick(elapsed_s: float, k=k, label=label, done_expected=done_expected, o=o) -> None:
                    progress.update(
                        task,
                        description=label,
                        completed=done_expected + min(elapsed_s, self._expected(o)),
                        step=f"{k + 1}/{len(self.outcomes)}",
                        left=f"{self._left_s(k, elapsed_s):.0f} s",
                    )

                interrupted = self._run_one(o, tick)
                done_expected += self._expected(o)
                mark = "[green]ok[/green]" if o.ok else "[red]FAILED[/red]"
                if o.interrupted:
                    mark = "[yellow]interrupted[/yellow]"
                progress.console.print(
                    f"  {k + 1:>2}/{len(self.outcomes)} §{o.section} {o.run.key:<15} {mark} "
                    f"{o.elapsed_s:5.1f} s  {o.run_dir or ''}",
                    highlight=False,
                )
                if interrupted:
                    return self.outcomes, True
        return self.outcomes, False

    def _run_one(self, o: Outcome, tick) -> bool:
        """Run one scenario to its end; True if Ctrl-C stopped it or came while it ran."""
        before = set(self.runs_dir.iterdir())
        cmd = [*_CHILD, *o.run.cli_args(self.quick), "--out", str(self.runs_dir)]
        o.log = self.logs_dir / f"{o.section}-{o.run.key}.txt"
        limit_s = max(120.0, 10 * self._expected(o))
        t0, timed_out = time.monotonic(), False
        with open(o.log, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_child_env())
            while True:
                try:
                    proc.wait(0.25)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.ctrl_c.pressed:
                    self._pass_on_ctrl_c(proc)
                    break
                elapsed = time.monotonic() - t0
                tick(elapsed)
                if elapsed > limit_s:
                    _stop(
                        proc, signal.SIGTERM
                    )  # its launcher stops its ranks and exits 130: ours, not Ctrl-C
                    timed_out = True
                    o.error = f"stopped after {limit_s:.0f} s (the lecture's limit for {o.run.key})"
                    break
        o.elapsed_s = time.monotonic() - t0
        o.exit_code = proc.returncode
        new = sorted(p for p in set(self.runs_dir.iterdir()) - before if p.is_dir() and not p.is_symlink())
        o.run_dir = new[-1] if new else None
        # Ours or the scenario's: whoever saw Ctrl-C, the lecture stops. A scenario that ended well
        # before we acted on it keeps its ok.
        interrupted = self.ctrl_c.pressed or (_stopped_by_sigint(o.exit_code) and not timed_out)
        o.ctrl_c = interrupted and not o.ok
        if o.ctrl_c:
            o.error = "interrupted (Ctrl-C)"
        elif not o.ok and not o.error:
            failures: list[str] = []
            if o.run_dir is not None and (o.run_dir / "result.json").is_file():
                failures = json.loads((o.run_dir / "result.json").read_text()).get("failures") or []
            o.error = _error_text(o, failures)
        return interrupted

    def _pass_on_ctrl_c(self, proc: subprocess.Popen) -> None:
        """From a terminal the scenario got Ctrl-C too: give it a moment, then pass it on, and kill
        it if it has not stopped its ranks after GRACE_S or at a second Ctrl-C."""
        presses, t0, passed_on = self.ctrl_c.presses, time.monotonic(), False
        while proc.poll() is None:
            waited_s = time.monotonic() - t0
            if self.ctrl_c.presses > presses or waited_s > 2.0 + GRACE_S:
                proc.kill()
            elif waited_s > 2.0 and not passed_on:
                proc.send_signal(signal.SIGINT)
                passed_on = True
            try:
                proc.wait(0.1)
            except subprocess.TimeoutExpired:
                pass
