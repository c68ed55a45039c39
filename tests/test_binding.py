"""`bind`: ranks pinned to CPUs as MPI launchers' --bind-to core. auto pins ranks over shm on one
host when each has a CPU of its own and the node runs no threads of its own; a pinned rank's
threads (started after the pin) stay on its CPU; result.json and the header line say where."""

import dataclasses
import json
import os

import pytest

import playground as pg
from playground.cli.testing import run_cli
from playground.config.scenario import load_scenario
from playground.core.errors import ScenarioError
from playground.launcher.launch import rank_cpus

CPUS = sorted(os.sched_getaffinity(0))


def _affinity(comm, params):
    return {"cpus": sorted(os.sched_getaffinity(0))}


@pytest.mark.parametrize(
    "scenario, ranks, transport, bind, pinned",
    [
        ("bench", 2, "shm", "auto", True),
        ("bench", 2, "ipc", "auto", False),  # ZeroMQ's I/O thread would share the rank's CPU
        ("bench", len(CPUS) + 1, "shm", "auto", False),  # more ranks than CPUs: the scheduler's
        ("overlap", 2, "shm", "auto", False),  # a node with a communication thread (THREADED)
        ("bench", 2, "ipc", "core", True),
        ("bench", len(CPUS) + 1, "shm", "core", True),  # round-robin
        ("bench", 2, "shm", "none", False),
    ],
)
def test_which_runs_are_pinned_and_where(scenario, ranks, transport, bind, pinned):
    s = load_scenario(scenario, ranks=ranks, transport=transport, overrides=[f"bind={bind}"])
    cpus = rank_cpus(s)
    if not pinned:
        assert cpus is None
    else:
        assert cpus == [CPUS[r % len(CPUS)] for r in range(ranks)]


def test_auto_pins_the_kinds_the_registry_calls_pinnable(monkeypatch):
    """`bind: auto` asks the transport's registry entry whether its ranks poll on their own thread."""
    from playground.comm import registry

    monkeypatch.setitem(registry.BY_NAME, "ipc", dataclasses.replace(registry.BY_NAME["ipc"], pinnable=True))
    assert rank_cpus(load_scenario("bench", ranks=2, transport="ipc")) == [CPUS[0], CPUS[1 % len(CPUS)]]


def test_a_pinned_rank_runs_on_its_cpu_only(tmp_path):
    r = pg.launch(_affinity, 2, transport="shm", bind="core", out=tmp_path, start_method="fork")
    assert [x["cpus"] for x in r.returned] == [[CPUS[0]], [CPUS[1 % len(CPUS)]]]
    assert r["rank_cpus"] == [CPUS[0], CPUS[1 % len(CPUS)]]
    unpinned = pg.launch(_affinity, 2, transport="shm", bind="none", out=tmp_path, start_method="fork")
    assert [x["cpus"] for x in unpinned.returned] == [CPUS, CPUS] and unpinned["rank_cpus"] is None


def test_the_run_says_where_its_ranks_are_pinned(tmp_path):
    p = run_cli(["run", "ring", "--ranks", "2", "--transport", "shm", "--out", str(tmp_path)], timeout_s=60)
    assert p.returncode == 0, p.stderr
    assert "2 ranks over shm, pinned to CPU" in p.stdout
    result = json.loads(next(tmp_path.glob("*-ring/result.json")).read_text())
    assert result["rank_cpus"] == [CPUS[0], CPUS[1 % len(CPUS)]]


def test_a_bad_bind_is_one_line():
    with pytest.raises(
        ScenarioError, match=r"--set bind=socket: expected one of auto, core, none, got 'socket'"
    ):
        load_scenario("ring", overrides=["bind=socket"])
    p = run_cli(["run", "ring", "--set", "bind=socket"], timeout_s=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "expected one of auto, core, none" in p.stderr
