"""Serving loses no request when a rank dies: the launcher restarts the group (recovery.max_restarts)
and the serving runs go on. The engine rank SIGKILLed from outside mid-setup, with requests in
flight: the restarted server answers from its journal the requests its predecessor finished (the
clients re-send them under the same ids) and runs the others again from their prompts; every
request is answered once, its tokens those of dense generation (seeded sampling). A tensor shard
killed mid-round: the rounds every rank finished are kept, the round in flight runs again, and
every t's tokens equal one process's. The launches run in this process (fork), as the command
line's do."""

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from playground.config.scenario import load_scenario
from playground.launcher.launch import Launcher
from playground.launcher.run import summarize
from playground.launcher.supervise import Supervisor
from playground.serving import serving_stats

SMALL_MODEL = ["params.layers=2", "params.d_model=32", "params.heads=4", "params.context=128"]
SERVING = [*SMALL_MODEL, "params.num_requests=40", "params.prompt_min=10", "params.prompt_max=30",
           "params.output_mean=30", "params.output_cap=60", "params.max_new_tokens=64",
           "params.capacity_tokens=2000", "params.verify_every=1", "params.temperature=0.8",
           "params.policies=[paged,reserve_max]", "recovery.max_restarts=1"]  # fmt: skip


def launched(scenario: str, ranks: int, sets: list[str], run_dir: Path):
    loaded = load_scenario(scenario, ranks=ranks, overrides=sets)
    run_dir.mkdir(parents=True)
    outcome = Launcher(loaded, run_dir, supervisor=Supervisor(loaded, run_dir, say=lambda line: None)).run()
    return loaded, outcome


def rank_pid(rank: int) -> int | None:
    for child in psutil.Process().children():
        try:
            if child.name() == f"pg-rank-{rank}":
                return child.pid
        except psutil.Error:
            continue
    return None


class KillWhen(threading.Thread):
    """SIGKILLs rank `rank` (from outside, as a dying machine would) once `ready()` is true."""

    def __init__(self, rank: int, ready):
        super().__init__(daemon=True)
        self.rank, self.ready, self.killed_at = rank, ready, None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.005):
            pid = rank_pid(self.rank)
            if pid is not None and self.ready():
                os.kill(pid, signal.SIGKILL)
                self.killed_at = time.monotonic()
                return


@pytest.mark.timeout(90)
def test_the_engine_rank_killed_mid_setup_is_restarted_and_every_request_answered_once(tmp_path):
    run_dir = tmp_path / "run"
    journal = run_dir / "serving-state" / "setup-0.jsonl"
    lines = lambda: len(journal.read_bytes().splitlines()) if journal.exists() else 0  # noqa: E731
    killer = KillWhen(0, lambda: lines() >= 10 and not (run_dir / "serving-state" / "setup-0.json").exists())
    killer.start()
    try:
        scenario, outcome = launched("serving", 3, SERVING, run_dir)
    finally:
        killer.stop.set()
    assert killer.killed_at is not None, "the engine rank was not killed mid-setup"
    assert outcome.ok, outcome.failures
    [restart] = outcome.restarts
    assert restart["rank"] == 0 and "SIGKILL" in restart["why"]
    report = summarize(scenario, outcome, run_dir)
    assert report.ok, report.failures  # dense generation equal (verify_every), same tokens in every setup
    first, second = outcome.results[0]["setups"]
    assert first["resumed"] and not second["resumed"]
    h = serving_stats.history(first)
    assert h["answered"] == 41 and h["twice"] == 0  # the 40 requests and params.prompt's, once each
    assert (
        h["loaded"] >= 10 and h["replayed"] == h["loaded"]
    )  # re-sent by the clients, answered from the journal
    assert 0 < h["generated"] - h["loaded"] < 41  # the others run again from their prompts
    assert any("resumed after a restart" in n for n in report.notes)
    assert serving_stats.history(second)["generated"] == 41


@pytest.mark.timeout(90)
def test_a_tensor_shard_killed_mid_round_runs_that_round_again_with_one_process_tokens(tmp_path):
    # 9 rounds of t = 1 and 2: more groups than a process may make, were they not kept across rounds
    sets = ["params.shapes=[small]", "params.tensor=[2]", "params.rounds=9", "params.simulate=[]",
            "params.new_tokens=8", "recovery.max_restarts=1",
            "fault.action=kill", "fault.rank=1", "fault.after_ops=80"]  # fmt: skip
    scenario, outcome = launched("serving-tensor", 2, sets, tmp_path / "run")
    assert outcome.ok, outcome.failures
    [restart] = outcome.restarts
    assert restart["rank"] == 1 and "SIGKILL" in restart["why"]
    assert 0 < outcome.results[0]["resumed_rounds"] < 9  # kept; the round in flight ran again
    report = summarize(scenario, outcome, tmp_path / "run")
    assert report.ok, report.failures  # every t's tokens equal the one-process run's
    history = report.data["history"]  # decode runs (round, t): the one in flight ran again, none lost
    assert history == {"asked": 18, "once": 18, "again": 2, "twice": 0, "never": 0, "differs": 0}
    runs = outcome.results[0]["shapes"][0]["runs"]
    assert sorted((r["round"], r["t"]) for r in runs) == [(r, t) for r in range(9) for t in (1, 2)]
