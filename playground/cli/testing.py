"""Helpers for tests: run the real CLI in a subprocess, with a timeout, and read what it wrote."""

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from playground.core.child import PLAYGROUND, session_processes, subprocess_env
from playground.core.errors import WaitTimeout

__all__ = [
    "PLAYGROUND",
    "run_cli",
    "run_scenario",
    "scenario_file_with",
    "session_processes",
    "start_cli",
    "subprocess_env",
]


def start_cli(args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """`python -m playground ARGS` started in a session of its own (so `session_processes` finds all
    it spawned), with its output in pipes."""
    return subprocess.Popen(
        [*PLAYGROUND, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=subprocess_env(env),
        start_new_session=True,
    )


def run_cli(
    args: list[str], timeout_s: float = 60, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`python -m playground ARGS` as a user would type it; the whole process group dies on timeout."""
    proc = start_cli(args, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise WaitTimeout(
            f"`playground {' '.join(args)}` did not finish in {timeout_s}s\n{out}\n{err}",
            what=f"`playground {' '.join(args)}`",
            waited_s=timeout_s,
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_scenario(
    scenario: str,
    out: Path,
    ranks: int | None = None,
    sets: Sequence[str] = (),
    transport: str | None = None,
    timeout_s: float = 60,
    env: dict | None = None,
) -> tuple[int, dict, str, str]:
    """(exit code, result.json or {}, stdout, stderr) of `run SCENARIO` into `out`."""
    args = ["run", scenario, "--out", str(out)]
    if ranks is not None:
        args += ["--ranks", str(ranks)]
    if transport:
        args += ["--transport", transport]
    for s in sets:
        args += ["--set", s]
    proc = run_cli(args, timeout_s=timeout_s, env=env)
    result_file = Path(out) / "latest" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    return proc.returncode, result, proc.stdout, proc.stderr


def scenario_file_with(name_or_path: str, overrides: list[str], directory: Path) -> Path:
    """A copy of the scenario, in `directory` under its own file name, with `overrides` (--set's
    KEY=VALUE) written into the file: the same values coming from the file instead of a flag."""
    import yaml

    from playground.config.scenario import apply_override, find_scenario_file, parse_override

    source = find_scenario_file(name_or_path)
    raw = yaml.safe_load(source.read_text())
    for text in overrides:
        apply_override(raw, *parse_override(text))
    path = Path(directory) / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path
