"""A rank that raises, is killed or hangs fails the whole run fast, names the culprit, and leaves
no process behind; so does Ctrl-C on the launcher."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tools import owned_scratch

from playground.cli.testing import run_scenario, session_processes, start_cli

TESTS = Path(__file__).resolve().parent


def launch(args, env_extra=None) -> subprocess.Popen:
    return start_cli(args, {"PYTHONPATH": str(TESTS), **(env_extra or {})})


TRANSPORTS = ["ipc", "tcp", "shm", "shm-pinned"]  # shm-pinned: every rank pinned to one CPU (bind: core)


def over(transport: str) -> list[str]:
    """The flags of a transport of TRANSPORTS."""
    if transport == "shm-pinned":
        return ["--transport", "shm", "--set", "bind=core"]
    return ["--transport", transport]


def finish(proc, timeout_s=30):
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        leftovers = session_processes(proc.pid)
        for p in leftovers:
            p.kill()
    return out, err, leftovers


SMALL = ["--set", "params.sizes=[4KiB]", "--set", "params.iters=200", "--set", "params.warmup=0"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "action,expect",
    [("kill", "killed by SIGKILL"), ("raise", "FaultInjected"), ("exit", "exited with status 3")],
)
def test_dead_rank_fails_fast_on_every_rank(runs_dir, action, expect, transport):
    t0 = time.monotonic()
    proc = launch(
        [
            "run",
            "ring",
            "--ranks",
            "4",
            *over(transport),
            "--out",
            str(runs_dir),
            "--set",
            "fault.rank=2",
            "--set",
            f"fault.action={action}",
            "--set",
            "fault.after_ops=20",
            "--set",
            "timeout_s=30",
            *SMALL,
        ]
    )
    out, err, leftovers = finish(proc)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, out + err
    assert not leftovers
    assert elapsed < 15, f"took {elapsed:.1f}s: a dead rank must be noticed well before the 30 s timeout"
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 2" in root and expect in root, err
    # every other rank was told and reported it
    for r in (0, 1, 3):
        assert any(
            f"rank {r} " in line and ("PeerLost" in line or "killed by the launcher" in line)
            for line in err.splitlines()
        ), err
    import json

    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    assert result["ok"] is False and any("rank 2" in f for f in result["failures"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action", ["kill", "hang"])
def test_a_dead_or_hung_peer_on_the_native_small_message_path(runs_dir, action):
    """Untraced 8-byte rd over shm: every step is one C call that posts and spins for the peer
    (sendrecv_reduce -> Mailboxes.exchange). Its waits still end in slices, so a killed peer is
    PeerLost on every other rank and a hung one is named, as on the other paths."""
    t0 = time.monotonic()
    proc = launch(
        ["run", "ring", "--ranks", "4", "--transport", "shm", "--out", str(runs_dir)]
        + ["--set", "fault.rank=2", "--set", f"fault.action={action}", "--set", "fault.after_ops=40"]
        + ["--set", "timeout_s=2", "--set", "params.algorithm=[rd]", "--set", "params.sizes=[8]"]
        + ["--set", "params.trace_messages=false", "--set", "params.iters=100000", "--set", "params.warmup=0"]
    )
    out, err, leftovers = finish(proc)
    assert proc.returncode == 1 and not leftovers, out + err
    assert time.monotonic() - t0 < 15
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 2" in root and ("killed by SIGKILL" if action == "kill" else "unresponsive") in root, err
    if action == "kill":
        for r in (0, 1, 3):
            assert any(f"rank {r} " in line and "PeerLost" in line for line in err.splitlines()), err


@pytest.mark.timeout(60)
def test_raising_user_node_reports_traceback(runs_dir):
    code, result, out, err = run_scenario(
        str(write_user_scenario(runs_dir.parent)), runs_dir, env={"PYTHONPATH": str(TESTS)}, timeout_s=50
    )
    assert code == 1
    assert "root cause: rank 1" in err and "ValueError: bad gradient on rank 1" in err
    assert "usernode_raise.py" in err  # the traceback points at the user's code
    assert result["ok"] is False


def write_user_scenario(tmp: Path) -> Path:
    p = tmp / "raise.yaml"
    p.write_text("name: raiser\nnode: usernode_raise:main\nranks: 3\ntimeout_s: 30\n")
    return p


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_hung_rank_is_named_with_its_stack(runs_dir, transport):
    t0 = time.monotonic()
    proc = launch(
        [
            "run",
            "ring",
            "--ranks",
            "3",
            *over(transport),
            "--out",
            str(runs_dir),
            "--set",
            "fault.rank=1",
            "--set",
            "fault.action=hang",
            "--set",
            "fault.after_ops=10",
            "--set",
            "timeout_s=2",
            *SMALL,
        ]
    )
    out, err, leftovers = finish(proc)
    assert proc.returncode == 1 and not leftovers
    assert time.monotonic() - t0 < 15
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and "unresponsive" in root, err
    assert "_fire_if_due" in err  # the hung rank's own stack shows where it was stuck


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ctrl_c_leaves_no_process_behind(runs_dir, transport):
    proc = launch(
        [
            "run",
            "ring",
            "--ranks",
            "4",
            *over(transport),
            "--out",
            str(runs_dir),
            "--set",
            "params.sizes=[1MiB]",
            "--set",
            "params.iters=100000",
        ]
    )
    deadline = time.monotonic() + 30
    while len(session_processes(proc.pid)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the ranks to exist, not papering over a race
    assert len(session_processes(proc.pid)) == 5
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    out, err, leftovers = finish(proc, timeout_s=20)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    assert "root cause" not in err  # Ctrl-C is not a failure to blame on a rank
    assert not leftovers
    assert owned_scratch(proc.pid) == []  # its sockets, rings and pipes are gone too (only its own count)
