"""Real processes racing on shared memory: updates are lost without a lock, never with one."""

import pytest

from playground.cli.testing import run_scenario


@pytest.mark.timeout(60)
def test_lost_updates_without_lock_none_with_lock(tmp_path):
    code, result, out, err = run_scenario(
        "race", out=tmp_path, timeout_s=50, sets=["params.increments=200000", "params.num_procs=4"]
    )
    assert code == 0, out + err
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["no lock"]["lost"] > 0
    assert rows["no lock"]["final"] < rows["no lock"]["expected"]
    for variant in ("lock", "atomic (kernel O_APPEND)", "sharded"):
        assert rows[variant]["final"] == rows[variant]["expected"] == 800_000, variant
    assert [r["orders"] for r in result["interleavings"]] == [20, 924]  # the lecture's two cases
    assert all(r["match"] for r in result["interleavings"])


@pytest.fixture(scope="module")
def concurrency_run(tmp_path_factory):
    code, result, out, err = run_scenario(
        "concurrency",
        out=tmp_path_factory.mktemp("concurrency"),
        timeout_s=50,
        sets=["params.cpu_task_ms=60", "params.repeats=1", "params.wait_s=0.05"],
    )
    assert code == 0, out + err
    return result


@pytest.mark.timeout(60)
def test_concurrency_threads_share_processes_do_not(concurrency_run):
    result = concurrency_run
    memory = {r["writer"]: r["main_sees"] for r in result["tables"][0]["rows"]}
    assert memory == {"thread": 42, "child process": 0}
    gil = {r["how"]: r for r in result["gil"]}
    assert list(gil) == ["one after another", "4 threads", "4 processes"]
    assert gil["one after another"]["speedup"] == 1.0
    assert gil["4 threads"]["model_speedup"] == 1.0 and gil["4 processes"]["model_speedup"] >= 1.0
    assert all(r["time_s"] > 0 and r["cpu_per_wall"] >= 0 for r in gil.values())
    waits = {r["how"]: r for r in result["waits"]}
    assert waits["8 waits one by one"]["model_s"] == pytest.approx(0.4)
    assert waits["8 threads waiting"]["model_s"] == pytest.approx(0.05)
    assert waits["8 waits one by one"]["time_s"] >= 0.4  # a sleep never ends early


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_concurrency_gil_and_waiting_concurrency(concurrency_run):
    gil = {r["how"]: r for r in concurrency_run["gil"]}
    assert gil["4 threads"]["cpu_per_wall"] < 1.15  # the GIL: never more than one core for threads
    waits = {r["how"]: r["time_s"] for r in concurrency_run["waits"]}
    assert waits["8 threads waiting"] < 0.5 * waits["8 waits one by one"]
