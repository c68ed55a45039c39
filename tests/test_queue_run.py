"""Real two-process queue and batching runs.

The default tests assert what holds whatever the machine's load: the shape of the result, the
models (pure functions of the parameters), identities between the saved stamps and the figures
computed from them, and orderings that causality guarantees. How close a measurement lands to
its model is asserted only by the `timing` tests (left out of the default run; `pytest -m
timing`), since on two shared cores it can miss for no fault of the code. The statistics
themselves are checked exactly on synthetic stamps in test_queue_stats.py / test_batching_stats.py.
"""

import numpy as np
import pytest

from playground.cli.testing import run_scenario
from playground.queueing.queue_stats import load_stats

QUEUE = [
    "params.loads=[0.5]",
    "params.service=fixed",
    "params.service_ms=5",
    "params.num_requests=200",
    "params.warmup_requests=20",
]
# costs x 0.25: 5 ms + 0.25 ms x b; capacity 190/s one at a time, 2,462/s batched (max 32)
BATCHING = [
    "params.rates_per_s=[100]",
    "params.time_scale=0.25",
    "params.duration_s=1.0",
    "params.drain_s=0.2",
]


@pytest.fixture(scope="module")
def queue_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("queue")
    code, result, stdout, stderr = run_scenario("queue", out=out, timeout_s=50, sets=QUEUE)
    assert code == 0, stdout + stderr
    return result, out / "latest"


@pytest.fixture(scope="module")
def batching_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("batching")
    code, result, stdout, stderr = run_scenario("batching", out=out, timeout_s=50, sets=BATCHING)
    assert code == 0, stdout + stderr
    return result


@pytest.mark.timeout(60)
def test_short_queue_run_saves_its_stamps_and_reports_their_statistics(queue_run):
    result, run_dir = queue_run
    (row,) = result["loads"]
    assert row["model_mean_ms"] == pytest.approx(7.5)  # M/D/1: 5 + 0.5 * 5 / (2 * 0.5)
    assert row["num"] == 180 and row["rate_per_s"] == pytest.approx(100.0)
    assert [t["title"] for t in result["tables"]][1:] == [
        "Percentiles",
        "Little's law: time-average number in system L vs lambda x W (arrival window)",
        "Where the time goes (ms, means)",
    ]
    assert all(len(t["rows"]) == 1 for t in result["tables"])
    assert result["files"] == ["latency_vs_load.png"]
    assert (run_dir / "latency_vs_load.png").stat().st_size > 0
    # the reported figures are exactly the statistics of the stamps the run saved
    stamps = np.load(run_dir / "queue-requests.npz")["load0"]
    assert stamps.shape == (6, 200) and not np.isnan(stamps).any()
    assert load_stats(0.5, 0.005, "fixed", 20, stamps) == pytest.approx(row, nan_ok=True)
    scheduled, sent, start, end, recv, demand = stamps
    assert np.allclose(demand, 0.005) and np.all(sent >= scheduled)  # a send never leaves early
    assert np.all((sent <= start) & (start <= end) & (end <= recv))  # one monotonic clock, in causal order
    # Little's law over the arrival window: L x window is the time requests spent inside it
    t0, t1 = sent[20], sent[-1]
    inside = np.clip(recv, t0, t1) - np.clip(sent, t0, t1)
    assert row["little_L"] * row["little_window_s"] == pytest.approx(inside.sum())
    assert row["little_lambda_W"] == pytest.approx(row["little_rate_per_s"] * row["little_W_ms"] / 1000)
    # a FIFO server can only be slower than the ideal one fed the same arrivals and service times
    assert row["messaging_mean_ms"] >= -1e-6 and row["late_send_mean_ms"] >= 0
    assert row["p50_ms"] <= row["p99_ms"] and row["replay_mean_ms"] >= 5.0 - 1e-9


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_short_queue_run_near_md1_and_little(queue_run):
    (row,) = queue_run[0]["loads"]
    # wide band: ZeroMQ hops and a busy shared machine add to the ideal server's latency
    assert 0.6 * row["model_mean_ms"] < row["mean_ms"] < 2.0 * row["model_mean_ms"]
    assert row["mean_ms"] >= row["replay_mean_ms"] - 0.5  # real never beats the ideal server by much
    assert row["little_L"] == pytest.approx(row["little_lambda_W"], rel=0.15)


@pytest.mark.timeout(60)
def test_batching_rows_follow_the_model_of_each_mode(batching_run):
    one, batched = batching_run["rows"]
    assert one["mode"] == "one at a time" and batched["mode"] == "batched"
    assert one["capacity_per_s"] == pytest.approx(1 / 0.00525)
    assert batched["capacity_per_s"] == pytest.approx(32 / (0.005 + 32 * 0.00025))
    for r in (one, batched):
        assert r["offered_per_s"] == pytest.approx(400.0) and r["sent"] > 0 and 0 <= r["dropped"] <= r["sent"]
        assert r["model_per_s"] == pytest.approx(min(r["arrived_per_s"], r["capacity_per_s"]))
        assert r["dev_pct"] == pytest.approx(100 * (r["throughput_per_s"] / r["model_per_s"] - 1))
        assert r["stable"] == (400.0 < r["capacity_per_s"])
    assert one["mean_batch"] == 1.0 and 1.0 <= batched["mean_batch"] <= 32  # max_batch bounds every batch
    capacity = {r["mode"]: r for r in batching_run["capacity"]}
    assert capacity["one at a time"]["best_per_s"] == one["throughput_per_s"]
    assert capacity["one at a time"]["saturated"] and not capacity["batched"]["saturated"]
    assert batching_run["files"] == ["batching.png"]


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_batching_beats_one_at_a_time_past_its_capacity(batching_run):
    one, batched = batching_run["rows"]
    assert one["throughput_per_s"] == pytest.approx(one["capacity_per_s"], rel=0.25)  # saturated
    assert one["dropped"] > 0  # the backlog was dropped, not drained for minutes
    assert batched["throughput_per_s"] == pytest.approx(batched["arrived_per_s"], rel=0.25)
    assert batched["mean_batch"] > 1.5
    assert batched["mean_ms"] < one["mean_ms"]


@pytest.mark.timeout(30)
def test_bad_queue_params_one_line_exit_2(tmp_path):
    code, _, out, err = run_scenario("queue", out=tmp_path, timeout_s=25, sets=["params.loads=[0.5,1.2]"])
    assert code == 2
    assert "params.loads" in err and "(0, 1)" in err and "Traceback" not in err
    code, _, out, err = run_scenario("queue", out=tmp_path, ranks=3, timeout_s=25)
    assert code == 2 and "ranks" in err
