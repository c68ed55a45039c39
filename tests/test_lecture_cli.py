"""`python -m playground lecture`: bad input, a scenario that fails, Ctrl-C."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from playground.lecture.command import run_lecture
from playground.testing import PLAYGROUND, run_cli, subprocess_env


@pytest.mark.parametrize("value", ["9", "x", "0", "1,,2", "1;2"])
def test_bad_sections_is_one_line_and_exit_2(tmp_path, value):
    proc = run_cli(["lecture", "--sections", value, "--out", str(tmp_path)], timeout_s=30)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: --sections: expected section numbers from 1 to 5")
    assert repr(value) in lines[0]
    assert not any(tmp_path.iterdir()), "nothing runs on bad input"


PLAN_WITH_A_FAILURE = """
sections:
  - number: 1
    id: trial
    title: Trial
    where: "§4.1, §5.2"
    intro: one scenario that works and one that fails
    scenarios:
      - name: translation
        expected_s: {full: 1, quick: 1}
      - name: pingpong
        quick: [fault.rank=1, fault.action=raise, params.iters=2, "params.sizes=[64,4KiB]"]
        expected_s: {full: 1, quick: 1}
    figures:
      - {id: ex8, where: "exercise 8", what: "0xC123", kind: exact, lecture: "0x134123"}
      - {id: alpha, where: "§5.2", what: alpha, kind: timed, unit: us, lecture: 0.7, why: "see above"}
"""


@pytest.mark.timeout(120)
def test_a_failed_scenario_does_not_stop_the_page(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN_WITH_A_FAILURE)
    code = run_lecture(None, True, tmp_path / "runs", plan_path=plan)
    assert code == 1
    err = capsys.readouterr().err
    assert (
        "FAILED pingpong" in err
        and "rerun it alone: python -m playground run pingpong --set fault.rank=1" in err
    )
    lecture_dir = (tmp_path / "runs" / "latest").resolve()
    page = json.loads((lecture_dir / "lecture.json").read_text())
    codes = {s["name"]: s["exit_code"] for s in page["scenarios"]}
    assert codes == {"translation": 0, "pingpong": 1}
    status = {f["id"]: f["status"] for f in page["figures"]}
    assert status == {"ex8": "matched", "alpha": "not measured"}
    html = (lecture_dir / "index.html").read_text()
    assert "FAILED" in html and "rank 1" in html
    assert "rerun it alone: <code>python -m playground run pingpong --set fault.rank=1" in html
    assert (lecture_dir / "summary.md").is_file()


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.timeout(90)
def test_ctrl_c_stops_the_running_scenario_and_exits_130(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [*PLAYGROUND, "lecture", "--sections", "2", "--quick", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        start_new_session=True,  # its own process group, as a terminal's foreground job is
    )
    try:
        deadline = time.monotonic() + 30
        while not list(out.glob("*-lecture/runs/*-queue")):  # the second scenario is under way
            assert time.monotonic() < deadline and proc.poll() is None, "the lecture did not start"
            time.sleep(0.1)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while _alive(proc.pid) and time.monotonic() < deadline:  # every rank of the scenario is gone
        time.sleep(0.1)
    assert not _alive(proc.pid)
    page = json.loads((Path(out / "latest").resolve() / "lecture.json").read_text())
    assert page["interrupted"] is True
    by_name = {s["name"]: s for s in page["scenarios"]}
    assert by_name["pipeline"]["exit_code"] == 0
    assert by_name["queue"]["exit_code"] == 130 and "interrupted" in by_name["queue"]["error"]
    assert by_name["batching"]["exit_code"] is None  # never started
