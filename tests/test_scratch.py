"""Scratch directories in /tmp and /dev/shm: a SIGKILLed launcher's are removed by the next launch."""

import os
import signal
import subprocess
import sys
import time

import pytest
from tools import owned_scratch

from playground.cli.testing import PLAYGROUND, run_cli, subprocess_env
from playground.core import scratch


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _make(parent, name, owner):
    d = parent / name
    d.mkdir()
    (d / "data").write_bytes(b"x")
    if owner is not None:
        (d / scratch.OWNER_FILE).write_text(str(owner))
    return d


def test_sweep_removes_only_directories_whose_owner_is_gone(tmp_path):
    dead = _make(tmp_path, "playground-40001", _dead_pid())
    alive = _make(tmp_path, "playground-40002", os.getpid())
    unowned = _make(tmp_path, "playground-40003", None)
    other = _make(tmp_path, "playground-raw-1", _dead_pid())
    assert scratch.sweep_stale((str(tmp_path),)) == [str(dead)]
    assert not dead.exists() and alive.exists() and unowned.exists() and other.exists()


def _own_shm(pid: int) -> list[str]:
    return [d for d in owned_scratch(pid) if d.startswith("/dev/shm/")]


@pytest.mark.timeout(90)
def test_a_killed_launchers_shared_memory_is_freed_by_the_next_run(runs_dir):
    proc = subprocess.Popen(
        [
            *PLAYGROUND,
            "run",
            "ring",
            "--ranks",
            "3",
            "--transport",
            "shm",
            "--out",
            str(runs_dir),
            "--set",
            "params.sizes=[1MiB]",
            "--set",
            "params.iters=100000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not any(os.path.exists(f"{d}/mbox-2") for d in _own_shm(proc.pid)):  # its own, not another run's
        assert time.monotonic() < deadline and proc.poll() is None, "the ranks never started"
        time.sleep(0.05)  # waiting for the ranks to exist, not papering over a race
    (left,) = _own_shm(proc.pid)
    proc.send_signal(signal.SIGKILL)  # the launcher only: it cannot clean up
    proc.wait(10)
    try:
        assert os.path.isdir(left)
        done = run_cli(
            ["run", "ring", "--ranks", "2", "--out", str(runs_dir), "--set", "params.sizes=[8]"], timeout_s=60
        )
        assert done.returncode == 0, done.stderr
        assert not os.path.exists(left)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the ranks die with the launcher; belt and braces
        except ProcessLookupError:
            pass
