"""The queue lab's statistics and report on synthetic stamps (no processes): every figure checked
against a hand-computed value or an identity that holds whatever the timing."""

import math

import numpy as np
import pytest

from nodes.queue import Params
from playground.queueing import queue_report
from playground.queueing.queue_stats import deviation_pct, load_stats

S = 0.005  # service time, seconds


def stamps(sent, demand, delivered=None, recv_delay=0.0, late=0.0):
    """Rows scheduled, sent, start, end, recv, demand of an ideal FIFO server with the given delays."""
    sent = np.asarray(sent, float)
    demand = np.asarray(demand, float)
    delivered = demand if delivered is None else np.asarray(delivered, float)
    start, end, free = np.empty_like(sent), np.empty_like(sent), -math.inf
    for i, (a, d) in enumerate(zip(sent, delivered, strict=True)):
        start[i] = max(a, free)
        end[i] = free = start[i] + d
    return np.stack([sent - late, sent, start, end, end + recv_delay, demand])


def test_no_queueing_every_figure_by_hand():
    n, warmup = 50, 10
    sent = np.arange(n) * 0.010  # one every 10 ms, each served 5 ms: never a queue
    row = load_stats(0.5, S, "fixed", warmup, stamps(sent, np.full(n, S)))
    assert row["num"] == n - warmup
    for key in ("mean_ms", "p50_ms", "p99_ms", "replay_mean_ms", "replay_p99_ms", "replay_delivered_mean_ms"):
        assert row[key] == pytest.approx(5.0), key
    for key in ("overhead_mean_ms", "messaging_mean_ms", "overshoot_mean_ms", "late_send_mean_ms"):
        assert row[key] == pytest.approx(0.0, abs=1e-9), key
    assert row["model_mean_ms"] == pytest.approx(7.5)  # M/D/1: S + rho S / (2 (1 - rho))
    assert row["mm1_mean_ms"] == pytest.approx(10.0) and row["md1_mean_ms"] == pytest.approx(7.5)
    assert row["rate_per_s"] == pytest.approx(100.0) and row["little_rate_per_s"] == pytest.approx(100.0)
    # busy 5 of every 10 ms over the window: L = 0.5 = lambda W = 100/s x 5 ms
    assert row["little_L"] == pytest.approx(0.5) and row["little_lambda_W"] == pytest.approx(0.5)
    assert row["little_W_ms"] == pytest.approx(5.0)
    assert row["little_window_s"] == pytest.approx((n - 1 - warmup) * 0.010)
    assert row["eff_load"] == pytest.approx(0.5) and row["eff_model_mean_ms"] == pytest.approx(7.5)


def test_queueing_delays_overhead_and_late_sends_land_in_their_columns():
    sent = np.array([0.0, 0.0, 0.0, 0.020, 0.040])  # three at once: the 2nd waits 5 ms, the 3rd 10
    row = load_stats(0.5, S, "exponential", 0, stamps(sent, np.full(5, S), recv_delay=0.001, late=0.0002))
    assert row["replay_mean_ms"] == pytest.approx((5 + 10 + 15 + 5 + 5) / 5)
    assert row["mean_ms"] == pytest.approx(row["replay_mean_ms"] + 1.0)  # 1 ms of messaging per reply
    assert row["overhead_mean_ms"] == pytest.approx(1.0) and row["messaging_mean_ms"] == pytest.approx(1.0)
    assert row["late_send_mean_ms"] == pytest.approx(0.2) and row["late_send_p99_ms"] == pytest.approx(0.2)
    assert row["model_mean_ms"] == pytest.approx(10.0)  # exponential service: M/M/1 is the model


def test_service_overshoot_is_measured_from_start_and_end_stamps():
    n = 20
    sent = np.arange(n) * 0.010
    row = load_stats(0.5, S, "fixed", 0, stamps(sent, np.full(n, S), delivered=np.full(n, S + 0.0003)))
    assert row["delivered_mean_ms"] == pytest.approx(5.3) and row["demand_mean_ms"] == pytest.approx(5.0)
    assert row["overshoot_mean_ms"] == pytest.approx(0.3)
    assert row["replay_delivered_mean_ms"] == pytest.approx(5.3) and row[
        "messaging_mean_ms"
    ] == pytest.approx(0)


def test_little_L_is_the_time_in_system_inside_the_window_whatever_the_stamps():
    rng = np.random.default_rng(3)
    n, warmup = 400, 40
    sent = np.cumsum(rng.exponential(S / 0.8, n))
    st = stamps(sent, rng.exponential(S, n), recv_delay=0.0004)
    row = load_stats(0.8, S, "exponential", warmup, st)
    t0, t1 = sent[warmup], sent[-1]
    inside = sum(max(0.0, min(r, t1) - max(a, t0)) for a, r in zip(st[1], st[4], strict=True))
    assert row["little_L"] * row["little_window_s"] == pytest.approx(inside)
    in_window = (sent >= t0) & (sent <= t1)
    assert row["little_W_ms"] == pytest.approx(1000 * np.mean((st[4] - st[1])[in_window]))
    assert row["little_lambda_W"] == pytest.approx(row["little_rate_per_s"] * row["little_W_ms"] / 1000)
    assert row["p50_ms"] <= row["p99_ms"] and row["replay_mean_ms"] <= row["mean_ms"]


def test_effective_load_near_saturation_has_no_model():
    n = 30
    sent = np.arange(n) * 0.005  # arrivals every S: effective load 1
    row = load_stats(0.95, S, "fixed", 0, stamps(sent, np.full(n, S)))
    assert row["eff_load"] == pytest.approx(1.0) and math.isnan(row["eff_model_mean_ms"])


def test_deviation():
    assert deviation_pct(11.0, 10.0) == pytest.approx(10.0)
    assert deviation_pct(9.0, 10.0) == pytest.approx(-10.0)
    assert math.isnan(deviation_pct(1.0, 0.0))


def synthetic_loads(loads=(0.5, 0.95)):
    rng = np.random.default_rng(0)
    out = []
    for rho in loads:
        sent = np.cumsum(rng.exponential(S / rho, 200))
        out.append(load_stats(rho, S, "fixed", 20, stamps(sent, np.full(200, S), recv_delay=0.0005)))
    return out


def test_report_tables_notes_and_plot(tmp_path):
    p = Params(loads=(0.5, 0.95), service="fixed", service_ms=5.0, num_requests=200, warmup_requests=20)
    loads = synthetic_loads()
    rep = queue_report.report(loads, p, tmp_path)
    assert rep.ok and rep.failures == [] and rep.data == {"loads": loads}
    assert rep.files == ["latency_vs_load.png"] and (tmp_path / "latency_vs_load.png").stat().st_size > 0
    latency, tails, little, where = rep.tables
    assert latency.title == "Latency vs load, fixed service, S = 5.0 ms (M/D/1 is the model)"
    assert latency.columns["model_mean_ms"] == "M/D/1 ms" and latency.columns["other_mean_ms"] == "M/M/1 ms"
    assert [t.title for t in rep.tables[1:]] == [
        "Percentiles",
        "Little's law: time-average number in system L vs lambda x W (arrival window)",
        "Where the time goes (ms, means)",
    ]
    for table in rep.tables:
        assert [r["load"] for r in table.rows] == [0.5, 0.95]
        assert list(table.rows[0]) == list(table.columns)  # every column shown, in row order
    for r, src in zip(latency.rows, loads, strict=True):
        assert r["other_mean_ms"] == src["mm1_mean_ms"]  # fixed service: the other model is M/M/1
        assert r["dev_pct"] == pytest.approx(100 * (src["mean_ms"] / src["model_mean_ms"] - 1))
    assert little.rows[0]["dev_pct"] == pytest.approx(
        deviation_pct(loads[0]["little_L"], loads[0]["little_lambda_W"])
    )
    assert where.rows[1]["messaging_mean_ms"] == loads[1]["messaging_mean_ms"]
    assert tails.rows[0]["dev_p99_pct"] == pytest.approx(
        deviation_pct(loads[0]["p99_ms"], loads[0]["model_p99_ms"])
    )
    assert rep.notes[0].startswith("exact_load: the sampled gaps and demands were rescaled")
    assert "+-7%" in rep.notes[0]  # 100 / sqrt(200)
    assert any(
        n.startswith("At load 0.95 the queue's relaxation time is about S/(1-rho)^2 = 2.0 s")
        for n in rep.notes
    )
    assert rep.notes[-1].startswith("Timestamps are CLOCK_MONOTONIC on one host")


def test_report_without_high_loads_or_exact_load(tmp_path):
    p = Params(loads=(0.5,), service="exponential", exact_load=False)
    rep = queue_report.report(synthetic_loads((0.5,)), p, tmp_path)
    assert rep.tables[0].columns["model_mean_ms"] == "M/M/1 ms"
    assert (
        rep.notes[0] == "exact_load=false: the sample means of gaps and demands differ from 1/lambda and S."
    )
    assert not any(n.startswith("At load") for n in rep.notes)
    assert len(rep.notes) == 7
