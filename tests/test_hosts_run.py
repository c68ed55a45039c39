"""`run --hosts K`: ranks on emulated hosts (network namespaces) compute exact results, and every
namespace, link and qdisc is gone afterwards, whether the run succeeded, was interrupted, lost a
rank, or its launcher was SIGKILLed (then the next run sweeps them)."""

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from playground import cli
from playground.cli.testing import run_cli, session_processes, start_cli
from playground.hosts import netns

pytestmark = pytest.mark.timeout(60)
SMALL = ["--set", "params.sizes=[8,1000,70KiB]", "--set", "params.iters=3", "--set", "params.warmup=1"]
ENDLESS = ["--set", "params.sizes=[64KiB]", "--set", "params.iters=1000000", "--set", "params.warmup=0"]


def finish(proc: subprocess.Popen, timeout_s: float = 40) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:  # a rank killed with its launcher (PR_SET_PDEATHSIG) may still be exiting: 5 s to go
        _, leftovers = psutil.wait_procs(session_processes(proc.pid), timeout=5)
        for p in leftovers:
            p.kill()
    assert not leftovers, f"processes left behind: {leftovers}"
    return out, err


def ranks_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """The launcher's forked ranks (same command line), not the `ip`/`tc` commands it runs."""
    try:
        launcher = psutil.Process(proc.pid)
        cmdline = launcher.cmdline()
        return [c for c in launcher.children() if c.cmdline() == cmdline]
    except psutil.Error:
        return []


def wait_for_ranks(proc: subprocess.Popen, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(ranks_of(proc)) < count and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the ranks to exist, not papering over a race
    assert len(ranks_of(proc)) == count


@pytest.mark.parametrize(
    "transport,link", [("ipc", "1gbit,delay=200us"), ("tcp", None)], ids=["ipc-inside-shaped-delayed", "tcp"]
)
def test_a_four_host_ring_is_exact_and_leaves_nothing(as_root, runs_dir, transport, link):
    args = ["run", "ring", "--ranks", "8", "--hosts", "4", "--transport", transport, "--out", str(runs_dir)]
    proc = start_cli(args + (["--link", link] if link else []) + SMALL)
    out, err = finish(proc)
    assert proc.returncode == 0, out + err
    assert netns.run_namespaces(proc.pid) == []
    assert "4 hosts (h0: ranks 0-1, h1: ranks 2-3, h2: ranks 4-5, h3: ranks 6-7)" in out
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    assert [row["size"] for row in result["rows"]] == [8, 1000, 70 * 1024]  # SMALL's sizes
    assert result["ok"] and all(row["wrong"] == 0 for row in result["rows"])  # exact, on every rank
    assert result["hosts"] == 4 and result["placement"] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert result["link"] == ({"rate": "1gbit", "delay": "200us"} if link else {})
    linked = "1gbit,delay=200us" if link else "unshaped"  # the model is the hosts' link's, not ipc's
    assert f"model: default for tcp across hosts linked at {linked}, not a calibration" in " ".join(
        out.split()
    )
    shown = run_cli(["inspect", str(runs_dir / "latest")]).stdout
    assert "per host (4 hosts" in shown and "bytes that crossed host links" in shown


def test_serving_on_two_hosts_reaches_its_kv_server_across_the_link(as_root, runs_dir):
    """The serving lab's KV server rank listens on its host's address, not its namespace's loopback:
    a client on the other host reaches it and every request is answered."""
    sets = ["params.num_requests=40", "params.policies=[paged]", "params.output_mean=8", "timeout_s=10"]
    args = ["run", "serving", "--ranks", "2", "--hosts", "2", "--out", str(runs_dir)]
    proc = start_cli(args + [a for s in sets for a in ("--set", s)])
    out, err = finish(proc)
    assert proc.returncode == 0, out + err
    assert netns.run_namespaces(proc.pid) == []
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    assert result["ok"] and result["hosts"] == 2 and result["placement"] == [0, 1]


def test_without_root_one_line_and_exit_2(monkeypatch, capsys, runs_dir):
    monkeypatch.setattr(netns, "euid", lambda: 1000)
    code = cli.main(["run", "ring", "--hosts", "2", "--out", str(runs_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--hosts needs root" in err[0]
    assert not runs_dir.exists()  # nothing was made


def test_ctrl_c_removes_every_namespace(as_root, runs_dir):
    proc = start_cli(["run", "ring", "--ranks", "4", "--hosts", "2", "--out", str(runs_dir), *ENDLESS])
    wait_for_ranks(proc, 4)
    assert len(netns.run_namespaces(proc.pid)) == 3
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    out, err = finish(proc, timeout_s=20)
    assert proc.returncode == 130 and "interrupted" in err, out + err
    assert netns.run_namespaces(proc.pid) == []


def test_ctrl_c_while_the_cluster_is_built_is_handled_once_it_runs(as_root, runs_dir):
    """Ctrl-C during setup (namespaces half made, the launcher entering the bridge's) is remembered
    and acted on once the run serves: no teardown is cut short, nothing is left."""
    proc = start_cli(["run", "ring", "--ranks", "4", "--hosts", "4", "--out", str(runs_dir), *ENDLESS])
    deadline = time.monotonic() + 30
    while not netns.run_namespaces(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = finish(proc, timeout_s=20)
    assert proc.returncode == 130 and "interrupted" in err, out + err
    assert netns.run_namespaces(proc.pid) == []


def test_a_killed_rank_fails_the_run_and_removes_every_namespace(as_root, runs_dir):
    proc = start_cli(
        ["run", "ring", "--ranks", "4", "--hosts", "2", "--out", str(runs_dir), *SMALL]
        + ["--set", "fault.rank=3", "--set", "fault.action=kill", "--set", "fault.after_ops=10"]
    )
    out, err = finish(proc)
    assert proc.returncode == 1, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 3 (pid" in root and "on h1" in root and "killed by SIGKILL" in root
    assert netns.run_namespaces(proc.pid) == []


def test_a_sigkilled_launchers_namespaces_are_swept_by_the_next_run(as_root, runs_dir):
    proc = start_cli(["run", "ring", "--ranks", "2", "--hosts", "2", "--out", str(runs_dir), *ENDLESS])
    wait_for_ranks(proc, 2)
    left = netns.run_namespaces(proc.pid)
    assert len(left) == 3
    os.kill(proc.pid, signal.SIGKILL)  # the launcher only: its ranks die with it (PR_SET_PDEATHSIG)
    finish(proc, timeout_s=20)
    # nobody could clean up: they stay until a launch sweeps them (this test's next run, or another
    # test's launch beside it, which sweeps every dead launcher's namespaces too)
    assert netns.run_namespaces(proc.pid) in (left, [])
    nxt = run_cli(["run", "ring", "--ranks", "2", "--hosts", "1", "--out", str(runs_dir), *SMALL])
    assert nxt.returncode == 0, nxt.stdout + nxt.stderr
    assert netns.run_namespaces(proc.pid) == []
