"""The minimum-RTT clock-offset estimator on synthetic clocks: known offsets, random and asymmetric
delays. Every assertion uses the estimate's own bound (half the best round trip), never a fixed
number of microseconds: the method promises |error| <= uncertainty, whatever the delays."""

import random

import pytest

from playground.core.errors import ScenarioError
from playground.tracing.clocks import (
    NUM_PROBES,
    ClockEstimate,
    ClockSample,
    ProbeRound,
    estimate,
    rank_clock_ns,
    skew_us,
)


def synthetic_samples(rng: random.Random, offset_us: float, n: int) -> list[ClockSample]:
    """Probes to a clock `offset_us` ahead: each way takes 20 us plus heavy-tailed queueing, and
    the far side spends 0-10 us before stamping or after."""
    samples, t = [], rng.uniform(0, 1e6)
    for _ in range(n):
        out = 20 + rng.expovariate(1 / 30) + (rng.random() < 0.2) * rng.uniform(0, 500)
        back = 20 + rng.expovariate(1 / 30) + (rng.random() < 0.2) * rng.uniform(0, 500)
        before, after = rng.uniform(0, 10), rng.uniform(0, 10)
        remote = t + out + before + offset_us
        samples.append(ClockSample(t, remote, t + out + before + after + back))
        t += rng.uniform(100, 1000)
    return samples


@pytest.mark.parametrize("seed", range(200))
def test_error_is_within_the_reported_bound(seed):
    rng = random.Random(seed)
    offset = rng.choice([0.0, rng.uniform(-1e6, 1e6), rng.uniform(-50, 50)])
    est = estimate(synthetic_samples(rng, offset, rng.randint(1, 16)))
    assert abs(est.offset_us - offset) <= est.uncertainty_us + 1e-6
    assert est.uncertainty_us == pytest.approx(est.rtt_us / 2)


def test_the_smallest_round_trip_wins():
    noisy = ClockSample(0.0, 1000.0 + 300.0, 400.0)  # rtt 400: says +1100
    clean = ClockSample(1000.0, 2000.0 + 25.0, 1050.0)  # rtt 50: says +1000
    est = estimate([noisy, clean, ClockSample(3000.0, 4000.0 + 90.0, 3100.0)])
    assert est == ClockEstimate(1000.0, 25.0, 50.0, 3)


def test_more_samples_tighten_the_bound():
    rng = random.Random(7)
    few = [estimate(synthetic_samples(rng, 123.0, 2)).uncertainty_us for _ in range(100)]
    many = [estimate(synthetic_samples(rng, 123.0, 16)).uncertainty_us for _ in range(100)]
    assert sum(many) < sum(few)


def test_no_samples_or_time_running_backwards_is_an_error():
    with pytest.raises(ValueError, match="no clock samples"):
        estimate([])
    with pytest.raises(ValueError, match="before it left"):
        estimate([ClockSample(10.0, 0.0, 5.0)])


class FakeClocks:
    """The coordinator's clock (true time) and each rank's (true time + skew); messages take random time."""

    def __init__(self, skews_us: dict[int, float], seed: int = 0):
        self.now_us, self.skews, self.rng = 0.0, skews_us, random.Random(seed)

    def coordinator_ns(self) -> int:
        return round(self.now_us * 1000)

    def travel(self) -> None:
        self.now_us += 15 + self.rng.expovariate(1 / 40)

    def rank_us(self, rank: int) -> float:
        return self.now_us + self.skews[rank]


def test_probe_round_probes_one_rank_at_a_time_and_estimates_each_offset():
    skews = {0: 0.0, 1: -3000.0, 2: 250_000.0, 3: 17.5}
    clocks = FakeClocks(skews)
    probes = ProbeRound(range(4), clock_ns=clocks.coordinator_ns)
    order = []
    while (probe := probes.next_probe()) is not None:
        rank, seq = probe
        order.append(rank)
        clocks.travel()
        remote = clocks.rank_us(rank)
        clocks.travel()
        assert not probes.answer(rank, seq + 1, remote, clocks.coordinator_ns())  # a stale answer is ignored
        assert probes.answer(rank, seq, remote, clocks.coordinator_ns())
    assert order == sorted(order) and len(order) == 4 * NUM_PROBES  # rank by rank, never interleaved
    assert probes.done and set(probes.estimates()) == set(skews)  # an estimate for every rank
    for rank, est in probes.estimates().items():
        # The rank adds its offset to its own times to get the coordinator's: the offset is -skew.
        assert abs(est.offset_us - -skews[rank]) <= est.uncertainty_us, (rank, est)
        assert est.samples == NUM_PROBES


def test_a_rank_that_does_not_answer_is_given_up_on():
    clocks = FakeClocks({0: 0.0, 1: 0.0})
    probes = ProbeRound(range(2), num_probes=2, clock_ns=clocks.coordinator_ns)
    assert probes.next_probe()[0] == 0
    assert not probes.overdue(clocks.coordinator_ns())
    clocks.now_us += 3e6
    assert probes.overdue(clocks.coordinator_ns())  # rank 0 never answered
    assert probes.next_probe()[0] == 1
    assert 0 not in probes.estimates()


def test_skew_variable():
    env = {"PLAYGROUND_CLOCK_SKEW_US": "2=250000, 1=-3000.5"}
    assert skew_us(2, env) == 250000.0 and skew_us(1, env) == -3000.5 and skew_us(0, env) == 0.0
    assert skew_us(0, {}) == 0.0
    for bad in ("2", "x=1", "2=fast"):
        with pytest.raises(ScenarioError, match="RANK=MICROSECONDS"):
            skew_us(0, {"PLAYGROUND_CLOCK_SKEW_US": bad})
    plain, skewed = rank_clock_ns(0, env), rank_clock_ns(2, env)
    assert abs((skewed() - plain()) / 1000 - 250000.0) < 1000  # the skew, give or take the two calls
