"""Faults nobody chose: a killed rank of every kind in every lab is the root cause, a client fails
the requests a restarted server lost within its timeout, and the chaos command runs, judges and
replays a few drawn runs; bad input is one line, exit 2. Under --recover the faults are mended: a
serving run whose server rank is killed restarts and loses nothing (its history checked), the
standalone server's clients re-send what its restart lost, and a history that is not whole fails.

The runs are the chaos command's own (chaos/launched.py, chaos/kvserver.py, judged by
chaos/checks.py), so what is asserted here is what the command checks on every drawn run: the exit
status, failures[0], and that nothing is left behind.
"""

import json
import subprocess
from dataclasses import replace

import pytest

from playground.chaos import kvserver, launched, recovered, report, results
from playground.chaos.checks import judge, parse_headline
from playground.chaos.faults import FAULTS, HOST_FAULTS
from playground.chaos.kinds import History, Observation
from playground.chaos.kvclient import error_kind
from playground.chaos.plan import draw, outside, replay_command
from playground.chaos.workloads import RECOVER_STEPS, WORKLOADS
from playground.cli import main
from playground.cli.testing import PLAYGROUND, subprocess_env
from playground.core.rundir import EXIT_BAD_INPUT
from playground.hosts import netns

pytestmark = pytest.mark.timeout(90)


# (workload, ranks, the rank killed: what it was doing)
KINDS = [
    ("collectives", 3, 1),  # a rank in a ring all-reduce
    ("buckets", 2, 1),  # a rank reducing gradient buckets
    ("train", 2, 1),  # a data-parallel training rank
    ("serving", 3, 0),  # the serving lab's KV server rank
    ("serving", 3, 2),  # a serving client, waiting in KVClient.collect
    ("kvcache", 3, 0),  # the KV-cache lab's server rank
    ("kvcache", 3, 1),  # a KV-cache client, waiting in KVClient.call
]


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "ranks", "rank"), KINDS, ids=[f"{w}-rank{r}" for w, _, r in KINDS])
def test_a_killed_rank_of_each_kind_is_the_root_cause(tmp_path, workload, ranks, rank):
    run = outside(workload, ranks, "SIGKILL", rank, after_s=1.0)
    if workload == "serving":  # its drawn 1,000 requests end about 1.3 s after the ranks start on a
        run = replace(run, args=(*run.args, "--set", "params.num_requests=4000"))  # fast core: past 1 s
    obs = launched.execute(run, tmp_path)
    assert obs.result["failures"], (obs.exit_code, obs.fault_at, obs.notes, obs.stderr[-2000:])
    root = parse_headline(obs.result["failures"][0])
    assert obs.exit_code == 1, obs.stderr[-2000:]
    assert root is not None and root[0] == rank and "killed by SIGKILL" in root[3], obs.result["failures"][:3]
    verdict = judge(run, obs, {})
    assert verdict.ok, verdict.problems
    assert verdict.leaks == []


@pytest.mark.parametrize(("workload", "rank"), [("train", 1), ("kvcache", 0), ("kvcache", 1)])
def test_a_stopped_rank_is_named_by_its_process_state(tmp_path, workload, rank):
    """SIGSTOP: the rank can neither work nor answer; the launcher sees state T, not a timeout."""
    run = outside(workload, 2 if workload == "train" else 3, "SIGSTOP", rank, after_s=0.5)
    obs = launched.execute(run, tmp_path)
    root = parse_headline(obs.result["failures"][0])
    assert obs.exit_code == 1 and root is not None, obs.stderr[-2000:]
    assert root[0] == rank and "stopped (SIGSTOP or Ctrl-Z: process state T)" in root[3], root
    verdict = judge(run, obs, {})
    assert verdict.ok, verdict.problems


def test_a_restarted_server_fails_the_lost_requests_within_the_clients_timeout(tmp_path):
    run = outside("kvserver", 2, "server restarted", 0, after_s=0.3)
    obs = kvserver.execute(run, tmp_path)
    assert obs.fault_at is not None, obs.notes
    assert [c["exit"] for c in obs.clients] == [1, 1], obs.stderr
    for c in obs.clients:  # the client's guarantee: the class of its error, and the restart it heard
        assert error_kind(c["stderr"]) == "ServerLost" and "the server restarted" in c["stderr"], c["stderr"]
        # a deadline per request: the lost ones fail within the timeout, not never
        assert c["exited_at"] - obs.fault_at < run.timeout_s + 2.0
    assert obs.exit_code == 0  # the new server goes on, and stops on SIGINT
    verdict = judge(run, obs, {})
    assert verdict.ok and verdict.root_ok, verdict.problems


@pytest.mark.slow
def test_a_recovering_serving_run_loses_no_request_when_its_server_rank_is_killed(tmp_path):
    run = outside("serving", 3, "server killed", 0, after_s=1.0, size_seed=1, recover=True)
    assert "--max-restarts" in run.args and "params.policies=[paged,reserve_max]" in run.args
    # the drawn 400 requests end about 1.5 s after the ranks start on a fast core: 1,500 outlast the fault
    run = replace(run, args=(*run.args, "--set", "params.num_requests=1500"))
    obs = launched.execute(run, tmp_path)
    verdict = judge(run, obs, {})
    assert obs.exit_code == 0 and verdict.ok and not verdict.missed, (verdict.problems, obs.stderr[-2000:])
    h = verdict.history
    assert h.restarts == 1 and h.once == h.asked == 2 * 1501 and h.twice == h.never == h.differs == 0
    assert verdict.root_ok and "rank 0" in verdict.root_cause and h.recover_s is not None
    assert verdict.leaks == []


@pytest.mark.slow
def test_a_recovering_training_run_ends_as_the_fault_free_run_when_a_rank_is_killed(tmp_path):
    run = outside("train", 2, "SIGKILL", 1, after_s=1.0, recover=True)
    assert "params.dtype=float64" in run.args and any(
        a.startswith("params.checkpoint_every=") for a in run.args
    )
    obs = launched.execute(run, tmp_path)
    verdict = judge(run, obs, {})
    assert obs.exit_code == 0 and verdict.ok, (verdict.problems, obs.stderr[-2000:])
    h = verdict.history
    assert h.restarts == 1 and h.once == h.asked == RECOVER_STEPS and h.twice == h.never == h.differs == 0
    assert verdict.root_ok and "rank 1" in verdict.root_cause and h.recover_s is not None
    assert (tmp_path / "fault-free" / "latest" / "result.json").exists()  # what it was checked against
    assert verdict.leaks == []


def test_a_training_history_counts_steps_lost_twice_and_differing_against_the_fault_free_run(
    tmp_path, monkeypatch
):
    run = outside("train", 2, "SIGKILL", 1, after_s=1.0, recover=True)
    clean = {"modes": [{"losses": [3.0, 2.0, 1.0], "hashes": ["a", "b"]}]}
    fault_free = recovered.fault_free
    monkeypatch.setattr(recovered, "fault_free", lambda run, out_dir: clean)
    restarts = [
        {"why": "rank 1 (pid 7 on vm) at 1.20s: killed by SIGKILL", "total_s": 0.4, "steps_redone": 2}
    ]
    result = {
        "recovery": {"restarts": restarts},
        "modes": [{"losses": [3.0, 2.0, 1.0], "hashes": ["a", "b"]}],
    }
    obs = Observation(fired=True, fault_at=1.0, exit_code=0, result=result, run_dir=tmp_path / "run")
    assert judge(run, obs, {}).ok
    h = recovered.training_history(run, obs)
    assert h == History(asked=3, once=3, again=2, restarts=1, recover_s=0.4)
    result["modes"] = [{"losses": [3.0, 2.5, 1.0, 1.0], "hashes": ["a", "c"]}]  # a step twice, another unlike
    assert judge(run, obs, {}).problems == ["1 of 3 done twice", "2 of 3 differing from a fault-free run"]
    result["modes"] = [{"losses": [3.0], "hashes": ["a", "b"]}]
    assert judge(run, obs, {}).problems == ["2 of 3 never done"]
    stripped = []
    monkeypatch.setattr(recovered.launched, "start", lambda args, out: stripped.extend(args) or FINISHED)
    assert fault_free(replace(run, args=(*run.args, "--set", "fault.rank=1")), tmp_path / "clean") is None
    assert "--max-restarts" not in stripped and not any(a.startswith("fault.") for a in stripped)
    assert stripped[:2] == ["run", "train"] and "params.dtype=float64" in stripped


class _Finished:
    pid = 0

    @staticmethod
    def wait(timeout=None):
        return 1


FINISHED = _Finished()


@pytest.mark.slow
def test_a_recovering_standalone_servers_clients_resend_and_finish(tmp_path):
    run = outside("kvserver", 2, "server restarted", 0, after_s=0.3, recover=True)
    obs = kvserver.execute(run, tmp_path)
    verdict = judge(run, obs, {})
    assert verdict.ok and [c["exit"] for c in obs.clients] == [0, 0], (verdict.problems, obs.stderr)
    h = verdict.history
    assert h.once == h.asked and h.again >= 1 and h.restarts == 1 and obs.journal_twice == 0
    assert h.twice == h.never == h.differs == 0  # every reply checked against dense generation


@pytest.mark.slow
def test_recover_on_hosts_draws_host_faults_and_a_killed_host_is_mended(tmp_path, as_root):
    """`chaos --recover --hosts`: the launched workloads also draw cut links, killed hosts and
    delayed links; a training run whose host is killed restarts on the mended cluster, without the
    drill, and ends as the fault-free run on the same hosts."""
    runs = [draw(7, k, True, recover=True) for k in range(1, 41)]
    on_hosts = [r for r in runs if r.fault in HOST_FAULTS]
    assert {r.fault.name for r in on_hosts} == {"cut_link", "kill_host", "delay_link"}
    assert all(r.hosts in (2, 3) and "--hosts" in r.args for r in runs if r.workload.launched)
    assert all(r.hosts is None for r in runs if not r.workload.launched)  # the standalone server
    assert [draw(7, k, False, recover=True).fault in HOST_FAULTS for k in range(1, 41)] == [False] * 40
    run = runs[0]
    assert (run.workload.name, run.fault.name, run.hosts) == ("train", "kill_host", 2)
    obs = launched.execute(run, tmp_path)
    verdict = judge(run, obs, {})
    assert obs.exit_code == 0 and verdict.ok, (verdict.problems, obs.stderr[-2000:])
    h = verdict.history
    assert h.restarts == 1 and h.once == h.asked == RECOVER_STEPS and h.twice == h.never == h.differs == 0
    assert verdict.leaks == []


def test_recover_draws_only_what_a_restart_mends_and_a_broken_history_fails():
    runs = [draw(5, k, False, recover=True) for k in range(1, 40)]
    assert runs == [draw(5, k, False, recover=True) for k in range(1, 40)]  # the seed decides
    for run in runs:
        assert run.recover and run.workload.recoverable is not None
        assert run.fault in run.workload.recoverable.faults and run.fault.name != "corrupt"
        assert run.workload.launched == ("--max-restarts" in run.args)
    assert {r.workload.name for r in runs} == {"serving", "serving-tensor", "kvserver", "train"}
    assert all(draw(5, k, False).workload.faults for k in range(1, 40))  # a --recover-only one is not drawn
    assert replay_command(5, 3, False, True).endswith("--only 3 --recover")
    run = outside("serving", 3, "SIGKILL", 1, after_s=1.0, recover=True)
    why = "rank 1 (pid 7 on vm) at 1.20s: killed by SIGKILL"
    result = {"recovery": {"restarts": [{"why": why, "total_s": 0.3}]}, "history": {"asked": 10, "once": 10}}
    obs = Observation(fired=True, fault_at=1.0, exit_code=0, result=result)
    assert judge(run, obs, {}).ok
    result["history"] = {"asked": 10, "once": 9, "never": 1, "twice": 2, "differs": 3}
    verdict = judge(run, obs, {})
    assert verdict.problems == [
        "2 of 10 done twice",
        "1 of 10 never done",
        "3 of 10 differing from a fault-free run",
    ]
    obs.result = {"history": {"asked": 10, "once": 10}}
    assert "the fault fired but nothing restarted" in judge(run, obs, {}).problems
    record = {"run": run.to_dict(), "verdict": verdict.to_dict(), "describe": run.describe(), "replay": "r"}
    (row, total) = report.rows([record], recover=True)
    assert (row["workload"], row["fault"]) == ("serving", "SIGKILL")
    assert (row["once"], row["twice"], row["never"], row["passed"]) == (
        9,
        2,
        1,
        0,
    )
    assert row["recover_p50_s"] == 0.3 and total["runs"] == 1 and total["once"] is None
    assert History.from_dict(verdict.history.to_dict()) == verdict.history
    page = results.recover_page([{"seed": 1, "records": [record]}], 2)
    assert (
        "1 runs in 1 of 2 pieces" in page
        and "| serving | SIGKILL | 1 | 0 | 0 | 9 | 0 | 2 | 1 | 3 | 0.30 |" in page
    )


def test_the_chaos_command_runs_judges_and_writes_every_run(runs_dir):
    seed, runs = 11, 3
    proc = subprocess.run(
        [*PLAYGROUND, "chaos", "--runs", str(runs), "--seed", str(seed), "--out", str(runs_dir)],
        capture_output=True,
        text=True,
        env=subprocess_env({"COLUMNS": "200"}),
        timeout=80,
    )
    summary = json.loads(next(runs_dir.glob("*-chaos/chaos.json")).read_text())
    records = summary["records"]
    assert [r["run"]["index"] for r in records] == [1, 2, 3]
    assert [r["run"] for r in records] == [
        draw(seed, k, False).to_dict() for k in (1, 2, 3)
    ]  # the seed decides
    failed = [r for r in records if not r["verdict"]["ok"]]
    assert proc.returncode == (1 if failed else 0), proc.stderr
    assert failed == [], report.failed_lines(failed)
    assert summary["table"][-1]["fault"] == "all" and summary["table"][-1]["runs"] == runs
    assert "chaos: 3 runs, seed 11" in proc.stdout and f"{runs} runs in " in proc.stdout


def _kv_observation(fault: str, *stderrs: str, code: int = 1) -> Observation:
    obs = Observation(fired=True, fault_at=10.0, exit_code=0 if fault == "server restarted" else -9)
    obs.clients = [
        {"client": k + 1, "exit": code, "exited_at": 12.0, "stderr": err} for k, err in enumerate(stderrs)
    ]
    return obs


def test_the_kv_judge_reads_the_class_of_each_clients_error_not_its_words():
    """After a restart a client fails with ServerLost if it heard the new server in its timeout,
    else with WaitTimeout (the new server slow to start on a loaded machine); a killed server
    leaves only the timeout. A client that said nothing, or exited otherwise, is named."""
    lost = (
        "error: ServerLost: kvcache client: generate requests 1, 2 to tcp://x are lost: the server restarted"
    )
    silent = "error: WaitTimeout: kvcache client: no reply to generate requests [1] from tcp://x in 6.0s"
    restarted = outside("kvserver", 2, "server restarted", 0, after_s=0.3)
    assert judge(restarted, _kv_observation("server restarted", lost, silent), {}).root_ok
    killed = outside("kvserver", 2, "server killed", 0, after_s=0.3)
    verdict = judge(killed, _kv_observation("server killed", silent, lost), {})
    assert not verdict.root_ok
    assert "every client must exit 1 with WaitTimeout: client 2: exit 1, ServerLost" in verdict.problems
    verdict = judge(restarted, _kv_observation("server restarted", lost, "", code=0), {})
    assert "client 1: exit 0, ServerLost; client 2: exit 0, no error line" in verdict.problems[-1]


def test_a_kv_client_that_had_every_answer_before_the_fault_is_done_not_failed():
    """The fault's moment is checked just before it fires: a client's last answer can come in
    between. Its `answered N at T` line (the same monotonic clock) says it was done."""
    lost = "error: ServerLost: kvcache client: generate requests 1 to tcp://x are lost: the server restarted"
    restarted = outside("kvserver", 2, "server restarted", 0, after_s=0.3)
    obs = _kv_observation("server restarted", "", lost)
    obs.clients[0] |= {"exit": 0, "stdout": "submitted [1]\nanswered 8 at 9.990000\ndone 8\n"}
    verdict = judge(restarted, obs, {})
    assert verdict.root_ok and not verdict.problems and not verdict.missed
    late = _kv_observation("server restarted", "", lost)  # answered after the fault: it should have failed
    late.clients[0] |= {"exit": 0, "stdout": "answered 8 at 10.010000\n"}
    assert "client 1: exit 0, no error line" in judge(restarted, late, {}).problems[-1]
    both = _kv_observation("server restarted", "", "", code=0)
    for c in both.clients:
        c["stdout"] = "answered 8 at 9.5\n"
    assert judge(restarted, both, {}).missed  # every client done first: the fault came after the run


def test_a_failed_run_is_named_with_the_command_that_replays_it():
    record = {
        "run": {"index": 4, "fault": "SIGSTOP"},
        "describe": "#4 train 2 ranks over ipc (d_model 32): SIGSTOP rank 1 at 0.50s",
        "verdict": {"ok": False, "problems": ["wrong root cause: rank 0 ..."]},
        "replay": replay_command(9, 4, True),
    }
    (line,) = report.failed_lines([record])
    assert line.startswith("run 4 (#4 train") and "wrong root cause" in line
    assert line.endswith("replay: python -m playground chaos --seed 9 --only 4 --hosts")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--runs", "0"], "--runs 0: expected at least 1"),
        (["--only", "0"], "--only 0: expected a run number"),
        (["--hosts"], "--hosts needs root"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, runs_dir, argv, says):
    monkeypatch.setattr(netns, "euid", lambda: 1000)  # not root, whoever runs the tests
    assert main(["chaos", *argv, "--out", str(runs_dir)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1, err
    assert not runs_dir.exists()  # refused before anything was made


def test_the_results_page_merges_the_finished_pieces(tmp_path):
    def record(index, fault, ok, detect_s):
        verdict = {"ok": ok, "missed": False, "root_ok": ok, "leaks": [], "detect_s": detect_s, "exit_s": 0.3}
        verdict["problems"] = [] if ok else ["wrong root cause: rank 0 ..."]
        return {"run": {"index": index, "fault": fault}, "describe": f"#{index}", "verdict": verdict,
                "replay": replay_command(2, index, True)}  # fmt: skip

    pieces = {
        "seed-1": {
            "seed": 1,
            "hosts": True,
            "command": "chaos --seed 1",
            "elapsed_s": 70.0,
            "table": [],
            "records": [record(1, "kill", True, 0.01)],
        },
        "seed-2": {
            "seed": 2,
            "hosts": True,
            "command": "chaos --seed 2",
            "elapsed_s": 70.0,
            "table": [],
            "records": [record(1, "kill", False, 0.03)],
        },
        "seed-3": {
            "seed": 3,
            "hosts": True,
            "command": "chaos --seed 3",
            "elapsed_s": 70.0,
            "records": [record(1, "hang", True, 4.0)],
        },  # stopped half-way
    }
    pieces["seed-10"] = pieces["seed-1"]  # seeds in number order, not as strings
    for name, summary in pieces.items():
        (tmp_path / name / "20261204-000000-chaos").mkdir(parents=True)
        (tmp_path / name / "20261204-000000-chaos" / "chaos.json").write_text(json.dumps(summary))
    measured_again = tmp_path / "seed-2" / "20261204-010000-chaos"  # a later run of a piece replaces it
    measured_again.mkdir()
    (measured_again / "chaos.json").write_text(json.dumps(pieces["seed-2"]))
    summaries = results.read_pieces(tmp_path)
    assert [s["seed"] for s in summaries] == [1, 2, 1]
    assert results.finished_piece(tmp_path / "seed-3") is None
    assert summaries[1]["started"] == "2026-12-04 01:00"  # the piece measured again, its own date
    text = results.page(summaries[:2], 8)
    assert text.startswith("2 runs on emulated hosts") and "in 2 of 8 pieces of fixed seeds (1, 2)" in text
    assert "| kill | 2 | 1 | 0 | 1 | 0 | 0 | 0.01 | 0.03 | 0.30 |" in text
    assert (
        "- run 1 (#1): wrong root cause: rank 0 ... replay: python -m playground chaos --seed 2 --only 1 --hosts"
        in text
    )


@pytest.mark.parametrize("fault", ["Ctrl-C", "SIGTERM", "server killed"])
def test_a_fault_that_finds_the_run_finished_is_missed_not_failed(fault):
    run = outside("serving", 2, fault, 0, after_s=1.9)
    result = {"ok": True, "t0_monotonic_s": 100.0, "elapsed_s": 1.5, "failures": []}
    late = Observation(exit_code=0, fault_at=101.6, exited_at=101.7, result=result)
    verdict = judge(run, late, {})
    assert verdict.missed and not verdict.problems
    during = Observation(exit_code=0, fault_at=101.2, exited_at=101.7, result=result)
    verdict = judge(run, during, {})  # a fault during the run must end it: 0 is a wrong exit
    expected = run.workload.expected_exit(run.fault)
    assert not verdict.missed and f"exit status 0, expected {expected}" in verdict.problems[0]


def _python_m_playground_with(code: str) -> subprocess.CompletedProcess:
    """`code` in a Python of its own: it replaces `playground.cli.main` and runs `python -m playground`."""
    return subprocess.run(
        [PLAYGROUND[0], "-c", code], capture_output=True, text=True, timeout=60, env=subprocess_env()
    )


def test_python_m_playground_ignores_a_late_interrupt():
    """After the command returns, Ctrl-C and SIGTERM are ignored while the interpreter shuts down
    (Python would otherwise reset its handler to the default there and die by the signal)."""
    code = (
        "import signal, sys, runpy; import playground.cli as cli\n"
        "cli.main = lambda: 0\n"
        "try:\n    runpy.run_module('playground', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
        "    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN\n"
        "    signal.raise_signal(signal.SIGINT); signal.raise_signal(signal.SIGTERM)\n"
        "    sys.exit(e.code)\n"
    )
    proc = _python_m_playground_with(code)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_python_m_playground_takes_sigterm_as_an_interrupt_outside_the_launcher():
    """SIGTERM while a command works before or after its ranks run (here: its report) says
    interrupted and exits 130, as Ctrl-C does, instead of ending the command as killed (-15)."""
    code = (
        "import signal, runpy, time; import playground.cli as cli\n"
        "def main():\n    signal.raise_signal(signal.SIGTERM)\n    time.sleep(30)\n    return 0\n"
        "cli.main = main\n"
        "runpy.run_module('playground', run_name='__main__')\n"
    )
    proc = _python_m_playground_with(code)
    assert proc.returncode == 130 and "interrupted" in proc.stderr, (proc.returncode, proc.stderr[-2000:])


def test_every_fault_kind_is_drawn_and_a_seed_still_draws_what_it_drew():
    """The tables are the only place a workload or a fault is named: every fault kind is drawn by a
    workload (or, with --hosts, by any launched one), an outside fault is a signal, and the draws of
    a seed are those of the runs measured before (the order of the draws is part of a seed)."""
    drawn = {f.name for w in WORKLOADS.values() for f in w.faults} | {f.name for f in HOST_FAULTS}
    assert drawn == set(FAULTS)
    assert all((f.signal is not None) == (f.source == "outside") for f in FAULTS.values())
    assert [draw(20, k, False).describe() for k in (1, 3, 4, 6)] == [
        "#1 kvcache 4 ranks over ipc (5000 requests): server killed rank 0 at 0.39s",
        "#3 kvserver 3 ranks over tcp (8 generates per client): server restarted at 0.32s",
        "#4 train 2 ranks over ipc (d_model 64): exit rank 1 at post 132",
        "#6 train 4 ranks over ipc (d_model 64): launcher SIGKILL at 1.05s",
    ]
    run = draw(1, 2, True)
    assert run.describe() == "#2 kvcache 4 ranks on 2 hosts (20000 requests): kill_host host h1 at 1.88s"
    assert run.args[-6:] == (
        "--set",
        "fault.action=kill_host",
        "--set",
        "fault.host=1",
        "--set",
        "fault.after_s=1.88",
    )
