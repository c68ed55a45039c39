"""`bench copy`: the copy bandwidth on one core and all, and the bound it sets on any all-reduce.
Checked: the pass counts (the physical minimum, our ring's closed form), and that the command writes
both tables with one row per size/kind and per size/rank count; no rate is asserted."""

import json
import subprocess
import sys

import pytest

from playground.cli.testing import run_cli, subprocess_env
from playground.commands.copybw import KINDS, MIN_PASSES, bound_ms, ring_passes


def test_ring_passes_count_the_copies_and_reductions_of_each_step():
    # N = 2: copy in (2), one reduction (3), all-gather copy in and out (4): 9 chunks of S/2
    assert ring_passes(2) == 4.5
    assert ring_passes(4) == 23 / 4 and ring_passes(8) == 51 / 8


def test_the_bound_is_every_rank_copying_its_buffer_once():
    """2 S per rank, fewer than any path (the ring's included), at the rate N ranks have: 2 ranks on
    2 cores copying 16 MiB at 20 GB/s together take 2 x 16 MiB / 20 GB/s."""
    assert MIN_PASSES == 2 and all(MIN_PASSES < ring_passes(n) for n in (2, 4, 8))
    assert bound_ms(2, 16 << 20, 10.0, 20.0, 2) == pytest.approx(2 * (16 << 20) / 20e9 * 1e3)
    assert bound_ms(1, 16 << 20, 10.0, 20.0, 2) == pytest.approx((16 << 20) / 10e9 * 1e3)  # one core's rate


@pytest.mark.timeout(60)
def test_bench_copy_writes_rates_and_bounds(tmp_path):
    proc = run_cli(
        [
            "bench",
            "copy",
            "--sizes",
            "1MiB,2MiB",
            "--iters",
            "2",
            "--rank-counts",
            "2,8",
            "--out",
            str(tmp_path),
        ],
        timeout_s=50,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(next(tmp_path.glob("*-copy/copy.json")).read_text())
    assert [(r["size"], r["kind"]) for r in got["rows"]] == [
        (s, k) for s in (1 << 20, 2 << 20) for k in KINDS
    ]
    assert all(r["one_core"] > 0 and r["all_cores"] > 0 for r in got["rows"])
    assert [(b["size"], b["ranks"]) for b in got["bounds"]] == [
        (s, n) for s in (1 << 20, 2 << 20) for n in (2, 8)
    ]
    b8 = next(b for b in got["bounds"] if b["ranks"] == 8 and b["size"] == 1 << 20)
    assert b8["bound_ms"] == pytest.approx(8 * 2 * (1 << 20) / (2 * b8["rate_gbps"] * 1e9) * 1e3)
    assert "| 2 MiB | 8 |" in proc.stdout


CTRL_C_WHILE_FORKING = """
import json, os, signal
from playground.commands import copybw

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C finds it, even in a background job

forked, real_fork = [], os.fork


def fork():  # Ctrl-C right after the last child is forked, before the parent has noted its pid
    pid = real_fork()
    if pid:
        forked.append(pid)
        if len(forked) == 2:
            os.kill(os.getpid(), signal.SIGINT)
    return pid


os.fork = fork
try:
    copybw.measure("C memcpy", 64 << 20, 2, 1000)  # minutes of copying, unless stopped
    outcome = "finished"
except KeyboardInterrupt:
    outcome = "interrupted"
left = []
for pid in forked:
    try:
        os.waitpid(pid, os.WNOHANG)
        left.append(pid)  # still ours: neither killed nor reaped
    except ChildProcessError:
        pass
for pid in left:
    os.kill(pid, signal.SIGKILL)
print(json.dumps({"outcome": outcome, "forked": len(forked), "left": left}))
"""


@pytest.mark.timeout(60)
def test_ctrl_c_while_children_are_forked_stops_and_reaps_every_one(tmp_path):
    """The worst moment for Ctrl-C: just after a fork, before the parent knows the child. It is held
    until then, so every child is killed and reaped, none is left copying."""
    proc = subprocess.run(
        [sys.executable, "-c", CTRL_C_WHILE_FORKING],
        capture_output=True,
        text=True,
        timeout=50,
        env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"outcome": "interrupted", "forked": 2, "left": []}
