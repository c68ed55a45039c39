"""One launched chaos run: `python -m playground run ...` started in a session of its own, its
ranks found by name (`pg-rank-R`, worker.py names them), the fault fired at its moment from
outside (a signal to a real pid) or left to fire inside (the scenario's fault keys), the logs
snapshotted as they grow, and what came of it observed: the exit status and its time, result.json,
the launcher's output, the ports it listened on.
"""

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from playground.chaos.kinds import ChaosRun, Observation
from playground.core.child import PLAYGROUND, subprocess_env

POLL_S = 0.02
SNAPSHOT_EVERY_S = 0.2
START_DEADLINE_S = 60.0  # python, numpy and the node imported, ranks forked


def start(args: list[str], out_dir: Path) -> subprocess.Popen:
    """`python -m playground ARGS` in a session of its own, its output in files (never a pipe a
    chatty run could fill)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "stdout.txt", "wb") as out, open(out_dir / "stderr.txt", "wb") as err:
        return subprocess.Popen(
            [*PLAYGROUND, *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=subprocess_env({"COLUMNS": "200"}),
            start_new_session=True,
        )


def rank_pids(launcher: psutil.Process) -> dict[int, int]:
    """rank -> pid of the launcher's rank processes (named pg-rank-R)."""
    out = {}
    try:
        for child in launcher.children():
            try:
                name = child.name()
            except psutil.Error:
                continue
            if name.startswith("pg-rank-") and name[8:].isdigit():
                out[int(name[8:])] = child.pid
    except psutil.Error:
        pass
    return out


def listening_ports(pids) -> set[int]:
    """The TCP ports these processes listen on (on this host's own network namespace)."""
    ports = set()
    for pid in pids:
        try:
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr:
                    ports.add(c.laddr.port)
        except psutil.Error:
            pass
    return ports


def snapshot_logs(run_dir: Path | None) -> dict:
    """{rank log: (size, sha1 of its bytes)}: what was written so far, to find again afterwards."""
    out: dict[str, tuple[int, str]] = {}
    if run_dir is None:
        return out
    for path in sorted(run_dir.glob("rank-*.jsonl")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        out[path.name] = (len(data), hashlib.sha1(data).hexdigest())
    return out


def run_dir_of(out_dir: Path) -> Path | None:
    latest = out_dir / "latest"
    return latest.resolve() if latest.exists() else None


def execute(run: ChaosRun, out_dir: Path) -> Observation:
    """Start the run, fire its fault, wait for its end; what happened (never raises for the run's sake)."""
    proc = start([*run.args, "--out", str(out_dir)], out_dir)
    obs = Observation(launcher_pid=proc.pid, sessions=[proc.pid], owners=[proc.pid])
    try:
        _drive(run, proc, out_dir, obs)
    finally:
        if proc.poll() is None:  # it did not end in time: a hang of the whole run
            obs.exit_code = None
            kill_session(proc.pid)
            proc.wait(10)
        obs.stdout = (out_dir / "stdout.txt").read_text(errors="replace")
        obs.stderr = (out_dir / "stderr.txt").read_text(errors="replace")
        obs.run_dir = run_dir_of(out_dir)
        result_file = obs.run_dir / "result.json" if obs.run_dir else None
        if result_file is not None and result_file.exists():
            obs.result = json.loads(result_file.read_text())
        if obs.fault_at is None:
            obs.fault_at = _fault_time(obs.result)
    return obs


def _drive(run: ChaosRun, proc: subprocess.Popen, out_dir: Path, obs: Observation) -> None:
    launcher = psutil.Process(proc.pid)
    deadline = time.monotonic() + START_DEADLINE_S
    while proc.poll() is None and time.monotonic() < deadline:
        obs.rank_pids = rank_pids(launcher)
        if len(obs.rank_pids) >= run.ranks:
            break
        time.sleep(POLL_S)
    ranks_at = time.monotonic()
    outside = run.fault.source == "outside"
    fire_at = ranks_at + run.after_s if outside else None
    end_at = ranks_at + run.after_s + run.exit_budget_s
    next_snapshot = 0.0
    while proc.poll() is None and time.monotonic() < end_at:
        now = time.monotonic()
        if now >= next_snapshot:
            obs.run_dir = obs.run_dir or run_dir_of(out_dir)
            obs.snapshots.append((now, snapshot_logs(obs.run_dir)))
            next_snapshot = now + SNAPSHOT_EVERY_S
        if fire_at is not None and now >= fire_at:
            if not run.hosts:
                obs.ports = listening_ports([proc.pid, *obs.rank_pids.values()])
            obs.snapshots.append((time.monotonic(), snapshot_logs(obs.run_dir)))
            obs.fault_at = _fire(run, proc, obs)
            fire_at = None
        time.sleep(POLL_S)
    if proc.poll() is not None:
        obs.exit_code, obs.exited_at = proc.returncode, time.monotonic()
    if outside and obs.fault_at is None:
        obs.fired = False


def _fire(run: ChaosRun, proc: subprocess.Popen, obs: Observation) -> float | None:
    """Send the run's outside fault; its time, or None if its target was already gone."""
    fault = run.fault
    assert fault.signal is not None  # an outside fault is a signal
    if fault.target == "launcher":
        pid: int | None = proc.pid
    else:
        pid = obs.rank_pids.get(run.rank) if run.rank is not None else None
    at = time.monotonic()  # before the signal: the launcher may see the death before kill() returns
    try:
        if pid is None:
            raise ProcessLookupError(run.rank)
        (os.killpg if fault.to_group else os.kill)(pid, fault.signal)
    except ProcessLookupError:
        obs.notes.append(f"the fault's target was gone before {run.after_s:.2f}s")
        return None
    return at


def _fault_time(result: dict) -> float | None:
    """An inside fault's or a host drill's time, from result.json's events (CLOCK_MONOTONIC)."""
    events = result.get("events") or []
    t0 = result.get("t0_monotonic_s")
    if not events or t0 is None:
        return None
    return t0 + events[0]["at_s"]


def kill_session(sid: int) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
