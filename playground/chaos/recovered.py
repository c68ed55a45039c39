"""The verdict on a run of `chaos --recover`: its fault must be mended, not only named. A launched
run is started with one restart allowed (`--max-restarts 1`): it must end with status 0 after at
least one restart whose cause names the faulty rank, and its history must be whole. The standalone
KV server is started again on its address: every client must end with status 0, its requests
re-sent and answered once.

A history (kinds.History) is what the run did once, again and never: a launched node reports its
own in its report's data (`history`: serving counts requests), and the restart the launcher made
is in result.json (`recovery.restarts`); the standalone clients print theirs on their last line
(kvclient.py), and the servers' journal says whether an id was answered twice. Training is read
against a fault-free run of the same command (its batches depend only on the step, so the two
must agree bit for bit in float64): steps in the record once, redone (the launcher's count from
the checkpoint to the step reached), twice and never; differs counts the steps whose loss differs
and the ranks whose final parameters' hash does.
"""

import json
import re
import subprocess
from pathlib import Path

from playground.chaos import launched
from playground.chaos.checks import names_the_fault, parse_headline
from playground.chaos.kinds import ChaosRun, History, Observation, Verdict
from playground.chaos.kvclient import error_kind

CLIENT_HISTORY = re.compile(r"^history (\{.*\})$", re.MULTILINE)
FAULT_FREE_TIMEOUT_S = 120.0


def judge_recovered(run: ChaosRun, obs: Observation, v: Verdict) -> None:
    unfired = any("never fired" in n for n in obs.result.get("notes") or [])
    if not obs.fired or unfired:
        if obs.exit_code == 0:
            v.missed = True  # the run ended before its fault: nothing to recover from
        else:
            v.problems.append(f"the run ended with status {obs.exit_code} before its fault fired")
        return
    if obs.exit_code is None:
        v.problems.append(f"did not exit within {run.exit_budget_s:.0f}s of the fault's moment")
        return
    if obs.exit_code != 0:
        failures = obs.result.get("failures") or obs.stderr.strip().splitlines()[-1:] or ["no output"]
        v.problems.append(f"exit status {obs.exit_code}, expected 0 after a restart: {failures[0][:200]}")
    assert run.workload.recoverable is not None, "drawn under --recover only"
    history = run.workload.recoverable.history(run, obs)
    if history is None:
        v.problems.append("no history to check (result.json has none)")
        return
    v.history = history
    v.detect_s = None
    if run.workload.launched:
        _root_cause(run, obs, v)
    else:
        failed = [
            f"client {c['client']}: exit {c['exit']}, {error_kind(c['stderr'])}"
            for c in obs.clients
            if c["exit"] != 0
        ]
        if failed:
            v.problems.append(f"every client must finish (exit 0): {'; '.join(failed)}")
    if history.restarts < 1:
        v.problems.append("the fault fired but nothing restarted")
    for name, what in (
        ("twice", "done twice"),
        ("never", "never done"),
        ("differs", "differing from a fault-free run"),
    ):
        if getattr(history, name):
            v.problems.append(f"{getattr(history, name)} of {history.asked} {what}")


def _root_cause(run: ChaosRun, obs: Observation, v: Verdict) -> None:
    """The first restart's cause must name the faulty rank, as a failure's root cause does."""
    restarts = (obs.result.get("recovery") or {}).get("restarts") or []
    if not restarts:
        return
    v.root_cause = restarts[0].get("why", "")
    v.root_ok = names_the_fault(run, parse_headline(v.root_cause))
    if not v.root_ok:
        v.problems.append(f"wrong cause of the restart: {v.root_cause[:200] or 'none'}")


def launched_history(run: ChaosRun, obs: Observation) -> History | None:
    """A launched run's history: its node's (the report's `history`) and the launcher's restarts."""
    node = obs.result.get("history")
    if not isinstance(node, dict):
        return None
    restarts = (obs.result.get("recovery") or {}).get("restarts") or []
    recover_s = restarts[0].get("total_s") if restarts else None
    return History.from_dict({**node, "restarts": len(restarts), "recover_s": recover_s})


def standalone_history(run: ChaosRun, obs: Observation) -> History | None:
    """The standalone server's clients' histories summed (each prints one as its last line), with
    the ids the servers' journal answered twice; the restart's time is the new server's start."""
    lines = [CLIENT_HISTORY.findall(c.get("stdout", "")) for c in obs.clients]
    if not obs.clients:
        return None
    got = [json.loads(found[-1]) for found in lines if found]
    asked = sum(h["asked"] for h in got) + sum(1 for found in lines if not found)  # no line: lost
    once = sum(h["answered"] for h in got)
    twice = obs.journal_twice or 0  # an id the servers answered twice: generated twice
    restarted = [n for n in obs.notes if n.startswith("restarted server up")]
    recover_s = float(restarted[0].split()[3].rstrip("s")) if restarted else None
    return History(
        asked=asked,
        once=once,
        again=sum(h["resent"] for h in got),
        twice=twice,
        never=asked - once,
        differs=sum(h["differs"] for h in got),
        restarts=len(restarted),
        recover_s=recover_s,
    )


def training_history(run: ChaosRun, obs: Observation) -> History | None:
    """A training run's steps and parameters, mode by mode, against a fault-free run's (module doc)."""
    modes = obs.result.get("modes")
    if not isinstance(modes, list) or obs.run_dir is None:
        return None
    clean = fault_free(run, obs.run_dir.parent / "fault-free")
    if clean is None:
        obs.notes.append("the fault-free run of the same command did not finish")
        return None
    restarts = (obs.result.get("recovery") or {}).get("restarts") or []
    asked = once = twice = never = differs = 0
    for got, want in zip(modes, clean.get("modes") or [], strict=False):
        mine, theirs = got["losses"], want["losses"]
        asked += len(theirs)
        once += min(len(mine), len(theirs))
        twice += max(0, len(mine) - len(theirs))
        never += max(0, len(theirs) - len(mine))
        differs += sum(a != b for a, b in zip(mine, theirs, strict=False))
        hashes = zip(got.get("hashes") or [], want.get("hashes") or [], strict=False)
        differs += sum(a != b for a, b in hashes)
    return History(
        asked=asked,
        once=once,
        again=sum(r.get("steps_redone") or 0 for r in restarts),
        twice=twice,
        never=never,
        differs=differs,
        restarts=len(restarts),
        recover_s=restarts[0].get("total_s") if restarts else None,
    )


def fault_free(run: ChaosRun, out_dir: Path) -> dict | None:
    """result.json of the run's command without its fault and its restarts, run in `out_dir`."""
    args, k = [], 0
    while k < len(run.args):
        flag, value = run.args[k], run.args[k + 1] if k + 1 < len(run.args) else ""
        if flag == "--max-restarts" or (flag == "--set" and value.startswith("fault.")):
            k += 2
        else:
            args.append(flag)
            k += 1
    proc = launched.start([*args, "--out", str(out_dir)], out_dir)
    try:
        code = proc.wait(FAULT_FREE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        launched.kill_session(proc.pid)
        proc.wait(10)
        return None
    run_dir = launched.run_dir_of(out_dir)
    result = run_dir / "result.json" if run_dir else None
    return json.loads(result.read_text()) if code == 0 and result and result.exists() else None
