"""Queueing, batching and pipeline formulas on hand-computed cases (lecture sections 2.1-2.4)."""

import math

import numpy as np
import pytest

from playground.models import pipeline as pl
from playground.models import queueing as q


def test_mm1_mean_is_service_over_idle_share():
    assert q.mm1_mean_sojourn_s(0.010, 0.9) == pytest.approx(0.100)  # lecture: 90% -> 100 ms (sim 104)
    assert q.mm1_mean_sojourn_s(0.010, 0.0) == pytest.approx(0.010)
    assert q.mm1_mean_sojourn_s(0.010, 0.95) / 0.010 == pytest.approx(20)  # pitfall 4: 20x at 95%


def test_mm1_quantiles_of_exponential_sojourn():
    assert q.mm1_sojourn_quantile_s(0.010, 0.95, 0.99) == pytest.approx(0.200 * math.log(100))  # ~0.92 s
    assert q.mm1_sojourn_quantile_s(0.010, 0.5, 0.5) == pytest.approx(0.020 * math.log(2))


def test_exercise5_load_limit_for_200ms():
    # 50 ms / (1 - rho) <= 200 ms  =>  rho <= 0.75, throughput 15/s
    assert q.mm1_mean_sojourn_s(0.050, 0.75) == pytest.approx(0.200)


def test_md1_pollaczek_khinchine_halves_the_wait():
    assert q.md1_mean_sojourn_s(0.010, 0.9) == pytest.approx(0.010 + 0.045)
    wait_md1 = q.md1_mean_sojourn_s(0.010, 0.8) - 0.010
    wait_mm1 = q.mm1_mean_sojourn_s(0.010, 0.8) - 0.010
    assert wait_md1 == pytest.approx(wait_mm1 / 2)
    assert q.mg1_mean_wait_s(0.010, 0.8, 1.0) == pytest.approx(wait_mm1)


def test_md1_wait_cdf_closed_cases():
    assert q.md1_wait_cdf(0.0, 0.010, 0.7) == pytest.approx(0.3)  # no wait with prob. 1 - rho
    # one term more for D <= t < 2D: (1-rho) * (e^{lt} + (l(D-t)) e^{l(t-D)})
    lam, t, d, rho = 50.0, 0.015, 0.010, 0.5
    expect = (1 - rho) * (math.exp(lam * t) + lam * (d - t) * math.exp(lam * (t - d)))
    assert q.md1_wait_cdf(t, d, rho) == pytest.approx(expect)


@pytest.mark.parametrize("rho", [0.3, 0.7, 0.9, 0.99, 0.995])
def test_md1_wait_tail_beyond_erlangs_sum_is_its_exponential_tail(rho):
    d = 0.025
    y, c = q.md1_tail_decay(rho)
    assert rho * math.expm1(y) == pytest.approx(y)
    for services in (20, 35, q.ERLANG_TERMS):  # Erlang's sum and the tail agree well before the switch
        exact = 1 - q.md1_wait_cdf(services * d, d, rho)
        if exact > 1e-9:
            assert c * math.exp(-y * services) == pytest.approx(exact, rel=1e-6)
    beyond = q.ERLANG_TERMS * d * 1.5
    assert q.md1_wait_cdf(beyond, d, rho) == pytest.approx(1 - c * math.exp(-y * beyond / d))
    # near saturation the tail is Pollaczek-Khinchine's mean wait, rho D / (2 (1 - rho))
    if rho >= 0.99:
        assert d / y == pytest.approx(rho * d / (2 * (1 - rho)), rel=0.01)


def test_md1_quantile_near_saturation():
    """rho 0.995 (a sweep's last point): the p99 lies 100s of services out, in the tail."""
    d, rho = 0.025, 0.995
    y, c = q.md1_tail_decay(rho)
    p99 = q.md1_sojourn_quantile_s(d, rho, 0.99)
    assert p99 - d == pytest.approx(d * math.log(c / 0.01) / y, rel=1e-3)


def test_md1_quantiles_match_a_long_replay():
    rng = np.random.default_rng(7)
    rho, service_s = 0.9, 0.010
    arrivals = np.cumsum(rng.exponential(service_s / rho, 200_000))
    sojourn = q.fifo_departures(arrivals, np.full(len(arrivals), service_s)) - arrivals
    assert np.percentile(sojourn, 99) == pytest.approx(
        q.md1_sojourn_quantile_s(service_s, rho, 0.99), rel=0.1
    )
    assert np.percentile(sojourn, 50) == pytest.approx(q.md1_sojourn_quantile_s(service_s, rho, 0.5), rel=0.1)


def test_little_law_examples():
    assert q.little_number_in_system(50, 2.0) == 100  # lecture 2.1
    assert q.little_number_in_system(40, 3.0) == 120  # exercise 3


def test_time_average_in_system_from_timestamps():
    arrivals, departures = np.array([0.0, 1.0]), np.array([2.0, 3.0])
    assert q.time_average_in_system(arrivals, departures, 0.0, 4.0) == pytest.approx(4.0 / 4.0)
    assert q.time_average_in_system(arrivals, departures, 0.0, 2.0) == pytest.approx((2 + 1) / 2)


def test_fifo_departures_hand_case():
    d = q.fifo_departures(np.array([0.0, 1.0, 5.0]), np.array([2.0, 2.0, 1.0]))
    assert d.tolist() == [2.0, 4.0, 6.0]


def test_batching_capacities_lecture():
    assert q.batch_capacity_per_s(0.020, 0.001, 1) == pytest.approx(1 / 0.021)  # ~48/s
    assert q.batch_capacity_per_s(0.020, 0.001, 32) == pytest.approx(32 / 0.052)  # ~615/s
    # exercise 6: 30 ms + 0.2 ms x b: 33 tokens/s at b=1, ~1495 at b=64
    assert q.batch_capacity_per_s(0.030, 0.0002, 64) == pytest.approx(1495, rel=1e-3)


def test_batch_departures_takes_everything_queued():
    arrivals = np.array([0.0, 0.001, 0.002, 0.100])
    d = q.batch_departures(arrivals, 0.020, 0.001, 32)
    assert d.tolist() == pytest.approx([0.021, 0.021 + 0.022, 0.043, 0.121])
    d1 = q.batch_departures(arrivals, 0.020, 0.001, 1)
    assert d1.tolist() == pytest.approx([0.021, 0.042, 0.063, 0.121])


def test_batch_steady_size_fluid():
    assert q.batch_steady_size(400, 0.020, 0.001, 32) == pytest.approx(400 * 0.02 / (1 - 0.4))
    assert q.batch_steady_size(10, 0.020, 0.001, 32) == 1.0
    assert q.batch_steady_size(2000, 0.020, 0.001, 32) == 32


def test_pipeline_lecture_figures():
    assert pl.pipeline_makespan_s([3, 5, 2], 100) == 505
    assert pl.sequential_time_s([3, 5, 2], 100) == 1000
    assert pl.bottleneck_throughput_per_s([0.003, 0.005, 0.002]) == pytest.approx(200)
    assert pl.pipeline_schedule_s([3, 5, 2], 100)[-1, -1] == 505


@pytest.mark.parametrize("m,expect", [(1, 0.75), (4, 3 / 7), (16, 3 / 19), (256, 3 / 259)])
def test_bubble_fraction_four_stages(m, expect):
    assert pl.bubble_fraction(4, m) == pytest.approx(expect)
    schedule = pl.pipeline_schedule_s([10.0] * 4, m)
    assert pl.measured_bubble_fraction([10.0 * m] * 4, schedule[-1, -1]) == pytest.approx(expect)


def test_bubble_rounded_as_lecture():
    assert [round(100 * pl.bubble_fraction(4, m), 1) for m in (1, 4, 16, 256)] == [75.0, 42.9, 15.8, 1.2]
