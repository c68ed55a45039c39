"""`pg.launch(function, ranks, params)`: the function runs on spawned rank processes, also when it
is a lambda or a closure (sent by value); a rank that raises is a RunFailed naming it, with the
root cause the command line prints; and Ctrl-C (SIGINT to the process that called pg.run or
pg.launch, as a notebook's stop button sends it) raises KeyboardInterrupt once every rank is gone
and nothing is left in /dev/shm or /tmp."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import usernode_raise
from tools import owned_scratch

import playground as pg
from playground.cli.testing import run_cli, session_processes, subprocess_env
from playground.core.errors import RunFailed

TESTS = Path(__file__).resolve().parent


def my_rank(comm, params):  # the documented example
    x = np.full(params["n"], comm.rank, dtype=np.float64)
    return {"sum": float(pg.allreduce(comm, x)[0])}


@pytest.mark.timeout(60)
def test_the_documented_example_runs_on_four_ranks(tmp_path):
    r = pg.launch(my_rank, ranks=4, params={"n": 1000}, out=tmp_path)
    assert r.ok and [v["sum"] for v in r.returned] == [6.0] * 4
    assert r.rows == [{"rank": k, **v} for k, v in enumerate(r.returned)]
    assert r.tables[0]["title"] == "my_rank: what each rank returned"
    saved = (r.run_dir / "scenario.yaml").read_text()
    assert "node: test_api_launch:my_rank" in saved and "n: 1000" in saved
    assert r.diagram().path.read_text().startswith("<svg")  # its messages, as inspect --diagram draws them


@pytest.mark.timeout(60)
def test_a_lambda_and_a_closure_go_by_value(tmp_path):
    r = pg.launch(lambda comm, params: comm.rank * params["k"], ranks=2, params={"k": 10}, out=tmp_path)
    assert [v["value"] for v in r.returned] == [0, 10] and r.run_dir.name.endswith("-launch")

    weights = np.arange(3.0) * 1.5  # an array no scenario file could hold: the closure carries it

    def scaled_sum(comm, params):
        return {"sum": float(pg.allreduce(comm, weights * comm.rank)[2])}

    r = pg.launch(scaled_sum, ranks=3, out=tmp_path)
    assert [v["sum"] for v in r.returned] == [9.0] * 3
    r = pg.launch(scaled_sum, ranks=2, out=tmp_path, start_method="fork")  # a script's fast path
    assert [v["sum"] for v in r.returned] == [3.0] * 2


@pytest.mark.timeout(60)
def test_launch_from_a_thread(tmp_path):
    """Off the main thread (a kernel's subshell, a GUI's worker) no signal handler can be set, and
    none is needed: only the main thread receives Ctrl-C."""
    import threading

    got = []
    thread = threading.Thread(
        target=lambda: got.append(pg.launch(my_rank, ranks=2, params={"n": 4}, out=tmp_path))
    )
    thread.start()
    thread.join(50)
    assert [v["sum"] for v in got[0].returned] == [1.0, 1.0]


@pytest.mark.timeout(60)
def test_a_rank_that_raises_is_the_root_cause_the_cli_prints(tmp_path):
    with pytest.raises(RunFailed) as raised:
        pg.launch(usernode_raise.main, ranks=3, out=tmp_path / "api")
    e = raised.value
    assert (e.rank, e.kind, e.error_type) == (1, "error", "ValueError")
    assert "usernode_raise.py" in e.traceback and 'raise ValueError("bad gradient on rank 1")' in e.traceback
    assert e.result.ok is False and e.result.run_dir.is_dir() and e.result.failures[0] == str(e)
    scenario = tmp_path / "raise.yaml"
    scenario.write_text("name: raiser\nnode: usernode_raise:main\nranks: 3\ntimeout_s: 30\n")
    done = run_cli(["run", str(scenario), "--out", str(tmp_path / "cli")], env={"PYTHONPATH": str(TESTS)})
    assert done.returncode == 1
    printed = next(ln for ln in done.stderr.splitlines() if ln.startswith("FAILED root cause: "))

    def unstamped(text):  # pids and times differ from run to run
        return re.sub(r" \(pid \d+[^)]*\) at [\d.]+s", "", text)

    assert unstamped(printed) == f"FAILED root cause: {unstamped(str(e))}"
    assert unstamped(str(e)) == "rank 1: ValueError: bad gradient on rank 1"


# A script that calls the API at its top level, without `if __name__ == "__main__":` (spawned ranks
# must not run it again), and reports what is left once KeyboardInterrupt reached it.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import psutil
    import playground as pg
    print("top level ran", flush=True)

    def hang(comm, params):
        open(os.path.join(params["dir"], f"rank-{comm.rank}.started"), "w").close()
        time.sleep(120)

    what, out = sys.argv[1], sys.argv[2]
    try:
        if what == "launch":
            pg.launch(hang, ranks=3, params={"dir": out}, transport="shm", out=out)
        else:
            pg.run("ring", ranks=3, transport="shm", sizes=["1MiB"], iters=100000, out=out)
    except KeyboardInterrupt:
        left = [p.cmdline() for p in psutil.Process().children(recursive=True)]
        print("KeyboardInterrupt", [c for c in left if "resource_tracker" not in " ".join(c)], flush=True)
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["launch", "run"])
def test_interrupt_stops_every_rank_and_leaves_nothing(what, tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), what, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 40
        # the ranks are running: the function said so, or (a scenario) their processes exist
        while not (
            len(list(tmp_path.glob("rank-*.started"))) == 3
            if what == "launch"
            else len(session_processes(proc.pid)) >= 5 and len(owned_scratch(proc.pid)) == 2
        ):
            assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
            time.sleep(0.05)
        scratch = owned_scratch(proc.pid)
        assert len(scratch) == 2  # /tmp/playground-<port> and /dev/shm/playground-<port>
        os.kill(proc.pid, signal.SIGINT)  # the process only, as Jupyter's stop button does
        out, err = proc.communicate(timeout=30)
    finally:
        for p in session_processes(proc.pid):
            p.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["top level ran", "KeyboardInterrupt []"], out + err
    assert "interrupted: every rank was stopped" in err
    assert not [d for d in scratch if os.path.exists(d)]
    deadline = time.monotonic() + 10  # the resource tracker exits once its parent has
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not session_processes(proc.pid)
