"""Ctrl-C during `bench copy` and `bench table`: one line ("interrupted"), exit 130, and nothing left
running, while children copy or ranks are measured."""

import os
import signal
import time

import pytest

from playground.cli.testing import session_processes, start_cli

pytestmark = pytest.mark.timeout(90)


def _interrupt_once(args: list[str], processes: int) -> tuple[int, str]:
    """Start the command, wait until its session holds `processes` processes, send SIGINT to the
    group as a terminal does; (exit code, stderr). Fails if anything of the session is left."""
    proc = start_cli(args)
    try:
        deadline = time.monotonic() + 60
        while len(session_processes(proc.pid)) < processes:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started its children"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert session_processes(proc.pid) == []
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stop_copying(tmp_path) -> tuple[int, str]:
    """Ctrl-C while `bench copy`'s parent and its copying children (one per core) run."""
    args = [
        "bench",
        "copy",
        "--sizes",
        "256MiB",
        "--iters",
        "50",
        "--rank-counts",
        "2",
        "--out",
        str(tmp_path),
    ]
    return _interrupt_once(args, 1 + min(2, len(os.sched_getaffinity(0))))


def test_ctrl_c_while_children_copy(tmp_path):
    code, err = _stop_copying(tmp_path)
    assert code == 130 and err.strip().splitlines()[-1] == "interrupted", err


def test_ctrl_c_while_bench_table_measures_ranks(tmp_path):
    # no busbw size, so no copy phase: the launcher and its 2 ranks
    args = ["bench", "table", "--rounds", "1", "--rank-counts", "2", "--systems", "shm", "--sizes", "8",
            "--iters", "100000", "--warmup", "0", "--out", str(tmp_path)]  # fmt: skip
    code, err = _interrupt_once(args, 3)
    assert code == 130 and err.strip().splitlines()[-1] == "interrupted", err


def test_ctrl_c_stops_a_command_started_with_sigint_ignored(tmp_path):
    """A background job of a non-interactive shell (a CI step) starts with SIGINT ignored, which
    Python keeps; a Ctrl-C sent on purpose must still stop the command."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the child, as from the shell
    try:
        code, err = _stop_copying(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and err.strip().splitlines()[-1] == "interrupted", err


def test_ctrl_c_while_calibrate_ping_pongs(tmp_path):
    """Ctrl-C during a ping-pong launch is an interruption, not a failed ping-pong; no file is written."""
    out = tmp_path / "c.json"
    args = ["calibrate", "--transports", "shm", "--sizes", "64,16MiB", "--copy-sizes", "64KiB,128KiB",
            "--ranks", "2,4", "--budget", "30", "--rounds", "1", "--out", str(out),
            "--work", str(tmp_path / "runs")]  # fmt: skip
    code, err = _interrupt_once(args, 5)  # the command and 4 ranks: the second launch (seconds at 16 MiB)
    assert code == 130 and err.strip().splitlines()[-1] == "interrupted", err
    assert not out.exists()
