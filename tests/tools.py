"""What a test needs from the machine (a tool, root, an optional package) and what happens without it.

A test whose tool is missing skips and says why; with PLAYGROUND_REQUIRE_TOOLS set (.ci/run sets
it, and installs every tool) it fails instead, so CI cannot pass by skipping. With
PLAYGROUND_SKIPPED_TOOLS naming a file, each test that skipped for a missing tool adds its id to
it: .ci/run runs the README's test command on a machine without the tools first, then installs
them and runs exactly those tests again, each tool now required.
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from playground.cli.testing import start_cli
from playground.core.scratch import OWNER_FILE, scratch_parents


def need(available: bool, reason: str) -> None:
    """Skip with `reason` when a tool is missing; fail when PLAYGROUND_REQUIRE_TOOLS is set (CI)."""
    if available:
        return
    if os.environ.get("PLAYGROUND_REQUIRE_TOOLS"):
        pytest.fail(f"{reason}, and PLAYGROUND_REQUIRE_TOOLS is set (.ci/run installs it)")
    pytest.skip(f"{reason}; {SKIP_SAYS}")


SKIP_SAYS = "set PLAYGROUND_REQUIRE_TOOLS=1 to make this a failure"  # how conftest knows a tool's skip


def note_skipped(report) -> None:
    """A test that skipped for a missing tool, its id one line in the file PLAYGROUND_SKIPPED_TOOLS
    names (conftest's report hook: also a test skipped by a module fixture that skipped before it)."""
    path = os.environ.get("PLAYGROUND_SKIPPED_TOOLS")
    if path and report.skipped and SKIP_SAYS in str(report.longrepr):
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")


def have(*tools: str) -> bool:
    return all(shutil.which(t) for t in tools)


def importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


NO_TORCH = "torch is not installed (pip install torch==2.13.0: a CPU build with Gloo and torchrun)"
NO_MPI4PY = "mpi4py is not installed (apt-get install mpich && pip install --no-binary mpi4py mpi4py)"
NO_MPICH = "mpiexec is not on PATH (apt-get install mpich)"


def chromium() -> str:
    """Headless Chromium's executable (needed: skip or, on CI, fail without it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    need(False, "chromium is not installed (apt-get install chromium)")


def run_chromium(exe: str, profile: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """Chromium headless with `args`, quiet (no network, no first run), its own profile; console
    messages go to stderr."""
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def owned_scratch(pid: int) -> list[str]:
    """The scratch directories (ipc sockets in /tmp, rings in /dev/shm) that the launcher `pid`
    claimed (its pid is in their owner file): a run's own, whatever other runs the machine has."""
    found = []
    for parent in scratch_parents():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            try:
                if name.startswith("playground-") and Path(
                    parent, name, OWNER_FILE
                ).read_text().strip() == str(pid):
                    found.append(os.path.join(parent, name))
            except OSError:
                pass
    return found


def run_owned(args: list[str], env: dict | None = None, timeout_s: float = 60) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, the launcher's pid) of `python -m playground ARGS`: with the pid,
    `owned_scratch` finds what this run, and no other, left behind."""
    proc = start_cli(args, env)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        pytest.fail(f"`playground {' '.join(args)}` did not finish in {timeout_s}s\n{out}\n{err}")
    return proc.returncode, out, err, proc.pid
