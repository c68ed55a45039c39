"""The verdict on one chaos run: did it end with a documented status, does the root cause name the
faulty rank (and host), how long from the fault to the first error and to the exit, do the logs
still hold what was written before the fault, and is nothing left behind (processes, scratch
directories in /tmp and /dev/shm, network namespaces, veth links and qdiscs, ports, KV blocks).

Times come from one clock: CLOCK_MONOTONIC, which the launcher's result.json lines up with
(`t0_monotonic_s`; failures and events count `at_s` from it). Timing is measured and reported, not
judged here, except a run that does not end at all.
"""

import hashlib
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

from playground.chaos.kinds import ChaosRun, Observation, Verdict
from playground.chaos.kvclient import answered_at, error_kind
from playground.core import scratch
from playground.core.child import session_processes
from playground.hosts import netns
from playground.launcher.supervise import GENERATIONS

LEFT_GRACE_S = 3.0  # how long processes may take to vanish after the launcher's exit (PDEATHSIG)
_HEADLINE = re.compile(r"^rank (\d+)(?: \(pid \d+(?: on (\S+))?\))? at ([\d.]+)s: (.*)$", re.S)


def parse_headline(line: str) -> tuple[int, str, float, str] | None:
    """(rank, host, at_s, message) of a failure line of result.json, or None (a report's failure)."""
    m = _HEADLINE.match(line)
    return (int(m.group(1)), m.group(2) or "", float(m.group(3)), m.group(4)) if m else None


def judge(run: ChaosRun, obs: Observation, before: dict) -> Verdict:
    """The verdict on `run` from what was observed (the workload's own checks, `judge_launched` or
    `judge_standalone`, then the logs and leaks); `before` is `cluster_state()` before it."""
    v = Verdict(exit_code=obs.exit_code)
    v.leaks = leaks(run, obs, before)
    recoverable = run.workload.recoverable
    judged = recoverable.judge if run.recover and recoverable is not None else run.workload.judge
    judged(run, obs, v)
    if not v.missed:
        v.problems += _log_problems(obs)
    v.problems += [f"leak: {leak}" for leak in v.leaks]
    v.ok = not v.problems
    return v


def judge_launched(run: ChaosRun, obs: Observation, v: Verdict) -> None:
    """A run of `python -m playground run`: its exit status, and the root cause naming the faulty
    rank (and host); an interrupt must say so and blame no rank."""
    fault = run.fault
    unfired = any("never fired" in n for n in obs.result.get("notes") or [])
    if not obs.fired or unfired:
        if obs.exit_code == 0:
            v.missed = True
        else:
            failures = obs.result.get("failures") or ["no result.json"]
            v.problems.append(
                f"the run ended with status {obs.exit_code} before its fault fired: {failures[0]}"
            )
        return
    if obs.exit_code is None:
        v.problems.append(f"did not exit within {run.exit_budget_s:.0f}s of the fault's moment")
        return
    if obs.exit_code == 0 and _finished_before(obs):
        # the fault found the finished run shutting down: a signal there is ignored, a rank killed
        # had nothing left to do
        v.missed = True
        return
    expected = run.workload.expected_exit(fault)
    if obs.exit_code != expected:
        v.problems.append(f"exit status {obs.exit_code}, expected {expected}")
    failures = obs.result.get("failures") or []
    v.root_cause = failures[0] if failures else ""
    t0 = obs.result.get("t0_monotonic_s")
    parsed = [p for f in failures if (p := parse_headline(f))]
    if obs.fault_at is not None:
        v.exit_s = obs.exited_at - obs.fault_at
        if parsed and t0 is not None:
            # at least 0: an inside fault's time is stamped by its rank, a few ms off the launcher's
            v.detect_s = max(0.0, t0 + min(p[2] for p in parsed) - obs.fault_at)
    if not fault.blames:
        v.detect_s = None  # nothing failed: the run was stopped on purpose
    if fault.interrupts:
        v.root_ok = "interrupted" in obs.stderr and "root cause" not in obs.stderr
        if not v.root_ok:
            v.problems.append("an interrupt must say interrupted and blame no rank")
        return
    if not fault.blames:
        return
    if fault.straggler:
        _judge_straggler(run, obs, v)
        return
    if fault.found_by:
        v.root_ok = any(re.search(fault.found_by, f) for f in failures)
        v.detect_s = None  # the result check reports at the end of the run
    else:
        v.root_ok = names_the_fault(run, parse_headline(v.root_cause) if v.root_cause else None)
    if not v.root_ok:
        v.problems.append(f"wrong root cause: {v.root_cause[:200] or 'none'}")


def _judge_straggler(run: ChaosRun, obs: Observation, v: Verdict) -> None:
    """A slowed rank fails nothing: the run ends well, and its report names the rank a straggler
    (or, just above the threshold on a busy machine, scores it the slowest); with more ranks than
    CPUs nothing is judged, and the run is missed."""
    found = obs.result.get("stragglers") or {}
    v.detect_s = None  # named at the end of the run
    v.root_cause = next((n for n in obs.result.get("notes") or [] if n.startswith("stragglers:")), "")
    if found.get("not_judged"):
        v.missed = True
        return
    scores = found.get("ranks") or {}
    slowest = min(scores, key=lambda r: scores[r]["relative"]) if scores else None
    v.root_ok = found.get("named") == [run.rank] or (not found.get("named") and slowest == str(run.rank))
    if not v.root_ok:
        v.problems.append(f"slow rank {run.rank} not named: {v.root_cause or 'no straggler scores'}")


def _finished_before(obs: Observation) -> bool:
    """The run had ended (ok, by its own clock) when the launcher's signal was sent."""
    t0, elapsed = obs.result.get("t0_monotonic_s"), obs.result.get("elapsed_s")
    if not obs.result.get("ok") or t0 is None or elapsed is None or obs.fault_at is None:
        return False
    return obs.fault_at > t0 + elapsed


def names_the_fault(run: ChaosRun, root: tuple[int, str, float, str] | None) -> bool:
    if root is None:
        return False
    rank, host, _, message = root
    says = run.fault.says
    if says is not None and says not in message:
        return False
    if run.fault.target == "host":
        return host == run.target_host or f"on host {run.target_host}" in message
    return rank == run.rank and (not run.hosts or host == run.target_host)


def judge_standalone(run: ChaosRun, obs: Observation, v: Verdict) -> None:
    """The standalone KV server's workload: a killed client's peers finish and its blocks are freed
    after its lease; a killed (or restarted) server's clients all fail, saying why, in their timeout."""
    fault = run.fault
    if not obs.fired:
        v.missed = True
        return
    if obs.fault_at is None or not obs.clients:
        v.problems.append("; ".join(obs.notes) or "the workload did not start")
        return
    expected = run.workload.expected_exit(fault)
    if obs.exit_code != expected:
        v.problems.append(f"the server's exit status {obs.exit_code}, expected {expected}")
    fault_at = obs.fault_at
    ended = [c["exited_at"] - fault_at for c in obs.clients if c["exited_at"] is not None]
    if any(c["exit"] is None for c in obs.clients):
        v.problems.append("a client did not exit")
    if not fault.clients_fail_with:  # a client killed: the others go on
        survivors = [c for c in obs.clients if c["client"] != run.rank]
        v.root_ok = all(c["exit"] == 0 for c in survivors) and obs.kv_freed is True
        v.root_cause = "; ".join(f"client {c['client']} exit {c['exit']}" for c in obs.clients)
        if obs.kv_freed is not True:
            v.leaks.append("KV blocks: the killed client's requests or blocks are still held after its lease")
        if not all(c["exit"] == 0 for c in survivors):
            v.problems.append(f"a surviving client failed: {obs.stderr[:200]}")
        return
    allowed = fault.clients_fail_with
    # a client that had every answer before the fault is done, not failed (the fault's moment is
    # checked just before it fires: a last answer can come in between)
    done = [
        c
        for c in obs.clients
        if c["exit"] == 0 and (t := answered_at(c.get("stdout", ""))) is not None and t <= fault_at
    ]
    if len(done) == len(obs.clients):
        v.missed = True
        return
    wrong = [
        f"client {c['client']}: exit {c['exit']}, {error_kind(c['stderr']) or 'no error line'}"
        for c in obs.clients
        if c not in done and not (c["exit"] == 1 and error_kind(c["stderr"]) in allowed)
    ]
    v.root_ok = not wrong
    v.root_cause = next(
        (c["stderr"].strip().splitlines()[-1] for c in obs.clients if c["stderr"].strip()), ""
    )
    if ended:
        v.detect_s, v.exit_s = min(ended), max(ended)
    if wrong:
        v.problems.append(f"every client must exit 1 with {' or '.join(allowed)}: {'; '.join(wrong)}")


def _log_problems(obs: Observation) -> list[str]:
    """Every rank log still starts with what it held at the last snapshot before the fault (in the
    run directory, or where a restart moved the failed generation's logs: generations/<n>/), and
    every whole line of it is JSON."""
    if obs.run_dir is None:
        return []
    before = [s for t, s in obs.snapshots if obs.fault_at is None or t <= obs.fault_at]
    problems = []
    for name, (size, digest) in (before[-1] if before else {}).items():
        kept = [obs.run_dir / name, *sorted(obs.run_dir.glob(f"{GENERATIONS}/*/{name}"))]
        if not any(_starts_with(path, size, digest) for path in kept):
            problems.append(f"log: {name} lost what it held before the fault ({size} bytes)")
    for path in obs.run_dir.glob("rank-*.jsonl"):
        lines = path.read_bytes().split(b"\n")
        for line in lines[:-1]:
            try:
                json.loads(line)
            except ValueError:
                problems.append(f"log: {path.name} has a line that is not JSON")
                break
    return problems


def _starts_with(path: Path, size: int, digest: str) -> bool:
    """Whether the file at `path` starts with `size` bytes whose SHA-1 is `digest`."""
    data = path.read_bytes() if path.exists() else b""
    return len(data) >= size and hashlib.sha1(data[:size]).hexdigest() == digest


# -- leaks ------------------------------------------------------------------------------------
def cluster_state() -> dict:
    """What is in this host's own network namespace that an emulated cluster must never leave:
    veth links and tbf qdiscs (counted: another program may own some)."""
    return {"veth": _count(["ip", "-o", "link", "show", "type", "veth"]), "tbf": _tbf_count()}


def _count(cmd: list[str]) -> int:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([line for line in out.splitlines() if line.strip()])


def _tbf_count() -> int:
    try:
        out = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(" tbf " in f" {line} " for line in out.splitlines())


def leaks(run: ChaosRun, obs: Observation, before: dict) -> list[str]:
    """What the run left behind, after what its next launch would sweep (a SIGKILLed launcher
    cannot clean up; the next launch removes its scratch and namespaces: that is the contract)."""
    out = []
    deadline = time.monotonic() + LEFT_GRACE_S
    left = session_processes(*obs.sessions)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_processes(*obs.sessions)
    if left:
        out.append(f"processes {[p.pid for p in left]}")
        for p in left:
            p.kill()
    if not run.fault.cleans_up:
        swept = scratch.sweep_stale() + netns.sweep_stale()
        obs.notes.append(f"left to the next launch's sweep, removed: {len(swept)}")
    for owner in obs.owners:
        out += [f"scratch {d}" for d in _scratch_of(owner)]
        out += [f"namespace {ns}" for ns in netns.run_namespaces(owner)]
    if run.hosts:
        now = cluster_state()
        out += [
            f"{k} in the host's namespace ({before.get(k, 0)} -> {now[k]})"
            for k in now
            if now[k] > before.get(k, 0)
        ]
    out += [f"port {p}" for p in sorted(obs.ports) if not _port_free(p)]
    return out


def _scratch_of(owner: int) -> list[str]:
    found = []
    for parent in scratch.scratch_parents():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not re.fullmatch(r"playground-\d+", name):
                continue
            try:
                if int(Path(parent, name, scratch.OWNER_FILE).read_text().strip() or 0) == owner:
                    found.append(os.path.join(parent, name))
            except (OSError, ValueError):
                continue
    return found


def _port_free(port: int) -> bool:
    """Whether a server could bind `port` on 127.0.0.1 again (SO_REUSEADDR: TIME_WAIT is fine)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
