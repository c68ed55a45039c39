"""The batching lab's statistics and report on synthetic stamps (no processes)."""

import math

import numpy as np
import pytest

from nodes.batching import Params
from playground.queueing import batching_report
from playground.queueing.batching_stats import capacity_rows, rate_stats, with_deviation


def test_one_at_a_time_below_capacity_by_hand():
    # 100 requests every 10 ms; each served in 5 ms (capacity 200/s), reply 5 ms after the send
    sent = np.arange(100) * 0.010
    row = rate_stats(0.005, 0.0, 1, 100.0, 0.0, sent, sent, sent + 0.005, np.ones(100, int), 0)
    assert row["mode"] == "one at a time" and row["max_batch"] == 1
    assert row["arrived_per_s"] == pytest.approx(100.0)
    assert row["capacity_per_s"] == pytest.approx(200.0) and row["model_per_s"] == pytest.approx(100.0)
    # the window is the last three quarters of the sends, [0.2475, 0.99]: replies 25..98 land in it
    assert row["throughput_per_s"] == pytest.approx(74 / 0.7425)
    assert row["replay_per_s"] == pytest.approx(row["throughput_per_s"])  # the ideal server, same stamps
    assert row["mean_ms"] == pytest.approx(5.0) and row["p99_ms"] == pytest.approx(5.0)
    assert row["replay_mean_ms"] == pytest.approx(5.0)
    assert row["mean_batch"] == 1.0 and row["replay_batch"] == 1.0 and row["fluid_batch"] == 1.0
    assert (row["sent"], row["dropped"], row["stable"]) == (100, 0, True)


def test_replay_batch_is_the_mean_batch_a_request_rode_in():
    # three arrive together and ride one batch (10 + 3 x 1 ms), the fourth rides alone
    sent = np.array([0.0, 0.0, 0.0, 0.1])
    recv = np.array([0.013, 0.013, 0.013, 0.111])
    row = rate_stats(0.010, 0.001, 4, 40.0, 0.0, sent, sent, recv, np.array([3, 3, 3, 1]), 0)
    assert row["mode"] == "batched"
    assert row["replay_batch"] == pytest.approx((3 * 3 + 1 * 1) / 4)
    assert row["mean_batch"] == pytest.approx(2.5)
    assert row["replay_mean_ms"] == pytest.approx((13 * 3 + 11) / 4)
    assert row["capacity_per_s"] == pytest.approx(4 / 0.014)


def test_dropped_requests_are_left_out_of_latency_and_overload_is_unstable():
    sent = np.arange(10) * 0.001
    recv = np.where(np.arange(10) < 4, sent + 0.02, np.nan)  # 6 never answered
    row = rate_stats(0.005, 0.0, 1, 1000.0, 0.0, sent, sent, recv, np.ones(10, int), 6)
    assert row["dropped"] == 6 and row["sent"] == 10 and not row["stable"]
    assert row["mean_ms"] == pytest.approx(20.0) and row["mean_batch"] == 1.0
    assert row["fluid_batch"] == 1.0  # max_batch 1 caps it
    nothing = np.full(10, np.nan)
    row = rate_stats(0.005, 0.0, 1, 1000.0, 0.0, sent, sent, nothing, np.ones(10, int), 10)
    assert math.isnan(row["mean_ms"]) and math.isnan(row["p99_ms"]) and row["throughput_per_s"] == 0


def rows():
    base = {"capacity_per_s": 100.0, "model_per_s": 50.0}
    return [
        {**base, "mode": "one at a time", "max_batch": 1, "throughput_per_s": 45.0, "stable": True},
        {**base, "mode": "one at a time", "max_batch": 1, "throughput_per_s": 90.0, "stable": False},
        {
            **base,
            "mode": "batched",
            "max_batch": 8,
            "capacity_per_s": 400.0,
            "throughput_per_s": 60.0,
            "stable": True,
        },
    ]


def test_deviation_and_capacity_rows():
    dev = with_deviation(rows())
    assert [r["dev_pct"] for r in dev] == pytest.approx([-10.0, 80.0, 20.0])
    assert list(dev[0])[-1] == "dev_pct" and "dev_pct" not in rows()[0]  # added last, input untouched
    one, batched = capacity_rows(rows(), (1, 8))
    assert one == {
        "mode": "one at a time",
        "max_batch": 1,
        "model_per_s": 100.0,
        "best_per_s": 90.0,
        "dev_pct": pytest.approx(-10.0),
        "saturated": True,
    }
    assert batched["best_per_s"] == 60.0 and not batched["saturated"]


def test_report(tmp_path):
    p = Params(rates_per_s=(100.0, 400.0), max_batch=8, time_scale=0.25)
    data = []
    for mode in p.modes():
        for rate in p.rates_per_s:
            sent = np.arange(50) / rate
            recv = sent + 0.002 * mode
            data.append(
                rate_stats(p.fixed_s, p.per_item_s, mode, rate, 0.0, sent, sent, recv, np.full(50, mode), 0)
            )
    rep = batching_report.report(data, p, tmp_path)
    table, capacity = rep.tables
    assert table.title == "Throughput and latency vs offered load" and len(table.rows) == 4
    assert all("dev_pct" in r for r in table.rows) and table.columns["dev_pct"] == "dev %"
    assert capacity.title == "Capacity: best measured throughput vs model"
    assert [r["max_batch"] for r in capacity.rows] == [1, 8] and rep.data == {"capacity": capacity.rows}
    assert rep.notes[0].startswith(
        "Cost of a batch of b: 5 ms + 0.25 ms x b. Capacity one at a time 1 / 5.25 ms"
    )
    assert "after 0.5 s of draining" in rep.notes[2]
    assert rep.files == ["batching.png"] and (tmp_path / "batching.png").stat().st_size > 0
