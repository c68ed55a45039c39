"""Helpers for tests: run the real CLI in a subprocess, with a timeout, and read what it wrote."""

import json
import os
import subprocess
import sys
from pathlib import Path


def run_cli(args: list[str], timeout_s: float = 60, cwd: Path | None = None, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    """`python -m playground ARGS` as a user would type it; the whole process group dies on timeout."""
    full_env = {**os.environ, **(env or {})}
    root = str(Path(__file__).resolve().parent.parent)  # the same playground the tests imported
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, full_env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "playground", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=full_env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"`playground {' '.join(args)}` did not finish in {timeout_s}s\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_scenario(scenario: str, out: Path, ranks: int | None = None, sets: list[str] = (),
                 transport: str | None = None, timeout_s: float = 60, env: dict | None = None
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
