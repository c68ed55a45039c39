"""Host drills: a cut link, a killed host and a delayed link each end the run with an error on every
surviving rank that names the lost rank and its host, the collective and its sequence number,
within a stated bound of the drill; the first failure is the root cause; exit 1; no process,
namespace or qdisc is left and the logs written so far are kept.

Bounds, from the drill's time in result.json's events to each survivor's error:
- cut_link: CUT_BOUND_S = 3.0 s: the host goes silent, and the coordinator declares its ranks lost
  after HEARTBEAT_LOST_S = 1.5 s without a heartbeat (checked every 0.1 s); the abort reaches every
  other rank within a 0.1 s wait slice; the rest is scheduling slack on a loaded 2-core machine.
- kill_host: KILL_BOUND_S = 1.0 s: the launcher sees the processes exit at once (their sentinels).
- delay_link by more than timeout_s: timeout_s + DELAY_SLACK_S (1.0 s): the ranks' receive timeout,
  as NCCL's watchdog: a slow link is not a dead one, so only the timeout can tell.
"""

import json
import re
import subprocess

import psutil
import pytest

from playground.cli.testing import PLAYGROUND, subprocess_env
from playground.hosts import netns
from playground.rendezvous.failures import HEARTBEAT_LOST_S

pytestmark = pytest.mark.timeout(60)
CUT_BOUND_S = 3.0
KILL_BOUND_S = 1.0
DELAY_SLACK_S = 1.0
RUN = [
    "run",
    "ring",
    "--ranks",
    "8",
    "--hosts",
    "4",
    "--set",
    "params.sizes=[4KiB]",
    "--set",
    "params.warmup=0",
]
_AT = re.compile(r"^rank (\d+) \(pid \d+ on (h\d)\) at ([\d.]+)s: (.*)$")


def run_drill(runs_dir, *sets: str, timeout_s: float = 30) -> tuple[dict, str, subprocess.Popen]:
    args = [
        *PLAYGROUND,
        *RUN,
        "--out",
        str(runs_dir),
        "--set",
        "params.iters=400",
        "--set",
        f"timeout_s={timeout_s}",
    ]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env()
    )
    try:
        _, err = proc.communicate(timeout=50)
    finally:
        proc.kill()
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    return result, err, proc


def failures(result: dict) -> dict[int, tuple[str, float, str]]:
    """rank -> (host, at_s, message) of each rank's first failure."""
    out = {}
    for line in result["failures"]:
        m = _AT.match(line)
        assert m, line
        out.setdefault(int(m.group(1)), (m.group(2), float(m.group(3)), m.group(4)))
    return out


def check_leftovers(runs_dir, proc, survivors) -> None:
    assert proc.returncode == 1
    assert netns.run_namespaces(proc.pid) == []
    assert not [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == proc.pid]  # no rank left
    for r in survivors:  # each survivor's log was written, up to and including its error
        events = (runs_dir / "latest" / f"rank-{r}.jsonl").read_text()
        assert '"name": "error"' in events


def test_a_cut_link_is_noticed_by_heartbeats_on_every_survivor(as_root, runs_dir):
    result, err, proc = run_drill(runs_dir, "fault.action=cut_link", "fault.host=1", "fault.after_ops=40")
    (cut,) = result["events"]
    assert cut["host"] == "h1" and "link of host h1 cut" in cut["event"]
    failed = failures(result)
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert re.search(r"rank [23] \(pid \d+ on h1\) at [\d.]+s: lost: no heartbeat for", root), err
    survivors = [0, 1, 4, 5, 6, 7]
    for r in survivors:
        host, at_s, message = failed[r]
        assert re.search(r"rank [23] on host h1 failed: lost", message), message
        assert re.search(r"\((in|after) (allreduce ring|barrier dissemination) #\d+", message), message
        assert at_s - cut["at_s"] <= CUT_BOUND_S, (r, at_s, cut)
        assert at_s - cut["at_s"] >= HEARTBEAT_LOST_S - 0.6  # it was the heartbeat, not something else
    check_leftovers(runs_dir, proc, survivors)


def test_a_killed_host_is_named_on_every_survivor(as_root, runs_dir):
    result, err, proc = run_drill(runs_dir, "fault.action=kill_host", "fault.host=2", "fault.after_s=0.3")
    (kill,) = result["events"]
    failed = failures(result)
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert re.search(
        r"rank [45] \(pid \d+ on h2\) at [\d.]+s: killed by SIGKILL \(every rank of host h2", root
    )
    survivors = [0, 1, 2, 3, 6, 7]
    for r in survivors:
        _, at_s, message = failed[r]
        assert re.search(
            r"PeerLost: .*\((in|after) (allreduce ring|barrier dissemination) #\d+.*rank [45] on host h2 failed",
            message,
        )
        assert at_s - kill["at_s"] <= KILL_BOUND_S, (r, at_s, kill)
    check_leftovers(runs_dir, proc, survivors)


def test_a_link_delayed_beyond_the_timeout_times_out_on_every_rank(as_root, runs_dir):
    result, err, proc = run_drill(
        runs_dir,
        "fault.action=delay_link",
        "fault.host=1",
        "fault.delay=30s",
        "fault.after_s=0.3",
        timeout_s=2,
    )
    (delayed,) = result["events"]
    assert "delay of 30s added to host h1's link" in delayed["event"]
    assert "cluster at" in err  # the drill is printed with the root cause
    failed = failures(result)
    for r in range(8):  # nobody is dead: every rank waits for a message that crosses h1's link
        _, at_s, message = failed[r]
        # where it waited: in or after a collective (a barrier also names the collective before it)
        named = (
            r"from rank \d tag -?\d+ \((in|after) (allreduce ring|barrier dissemination) #\d+"
            r"(, after (allreduce ring|barrier dissemination) #\d+)?; rank \d is on host h\d\)"
        )
        assert re.search("timed out after 2.0s waiting for .* " + named, message) or "PeerLost" in message, (
            message
        )
        assert at_s - delayed["at_s"] <= 2 + DELAY_SLACK_S, (r, at_s, delayed)
    check_leftovers(runs_dir, proc, range(8))
