"""The alpha-beta model against hand-computed cases, and the fit that measures alpha and beta."""

import math

import pytest

from playground.models.alphabeta import (
    AlphaBeta,
    allreduce_messages_per_rank,
    fit_alpha_beta,
    ring_tree_crossover_bytes,
)

# The lecture's InfiniBand link (section 5.3): alpha = 5 us, 50 GB/s.
IB = AlphaBeta(alpha_s=5e-6, beta_bytes_per_s=50e9)
LECTURE_TENSORS = [100_000] * 1000  # 1000 x 100 KB = 100 MB


def test_lecture_1000_small_messages_take_about_7_ms():
    # each message: 5 us + 100e3 / 50e9 s = 5 us + 2 us = 7 us; 1000 of them = 7 ms
    assert IB.sends_time_s(LECTURE_TENSORS) == pytest.approx(7.0e-3)


def test_lecture_one_bucket_takes_about_2_ms():
    # one message: 5 us + 100e6 / 50e9 s = 2.005 ms
    assert IB.sends_time_s([sum(LECTURE_TENSORS)]) == pytest.approx(2.005e-3)


def test_half_bandwidth_point():
    assert IB.half_bandwidth_bytes == pytest.approx(250_000)  # 5 us * 50 GB/s
    n = IB.half_bandwidth_bytes
    assert n / IB.message_time_s(n) == pytest.approx(IB.beta_bytes_per_s / 2)


def test_ring_allreduce_hand_computed():
    # N = 4, S = 100 MB: 2*3 steps of (5 us + 25 MB / 50 GB/s = 505 us) = 3.03 ms
    assert IB.allreduce_time_s(100e6, 4) == pytest.approx(6 * 505e-6)
    # N = 2: 2 * (alpha + S / (2 beta)) = 2 alpha + S / beta
    assert IB.allreduce_time_s(100_000, 2) == pytest.approx(2 * 5e-6 + 2e-6)


def test_ring_schedule_of_the_lecture_gradients_on_4_ranks():
    per_tensor = IB.schedule_time_s(LECTURE_TENSORS, 4)
    one_bucket = IB.schedule_time_s([sum(LECTURE_TENSORS)], 4)
    # per tensor: 1000 * 6 * (5 us + 25 KB / 50 GB/s = 5.5 us) = 33 ms; one bucket: 3.03 ms
    assert per_tensor == pytest.approx(33e-3)
    assert one_bucket == pytest.approx(3.03e-3)
    assert per_tensor - one_bucket == pytest.approx(999 * 6 * 5e-6)  # the alphas saved


def test_tree_allreduce_hand_computed():
    # N = 5: ceil(log2 5) = 3 levels, up and down: 6 * (5 us + 100e3 / 50e9) = 42 us
    assert IB.allreduce_time_s(100_000, 5, "tree") == pytest.approx(42e-6)


def test_trivial_cases_cost_nothing():
    assert IB.allreduce_time_s(1e9, 1) == 0.0
    assert IB.allreduce_time_s(0, 8) == 0.0
    assert IB.schedule_time_s([], 8) == 0.0
    assert allreduce_messages_per_rank(1) == 0
    assert allreduce_messages_per_rank(4) == 6
    assert allreduce_messages_per_rank(8, "tree") == 6


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="algorithm"):
        IB.allreduce_time_s(10, 4, "butterfly")
    with pytest.raises(ValueError, match="num_ranks"):
        IB.allreduce_time_s(10, 0)
    with pytest.raises(ValueError, match="beta_bytes_per_s"):
        AlphaBeta(1e-6, 0)
    with pytest.raises(ValueError, match="alpha_s"):
        AlphaBeta(-1e-6, 1e9)


def test_fit_recovers_exact_parameters():
    truth = AlphaBeta(alpha_s=30e-6, beta_bytes_per_s=2e9)
    sizes = [8, 1024, 65536, 1 << 20, 4 << 20]
    fit = fit_alpha_beta(sizes, [truth.message_time_s(n) for n in sizes])
    assert fit.alpha_s == pytest.approx(truth.alpha_s, rel=1e-6)
    assert fit.beta_bytes_per_s == pytest.approx(truth.beta_bytes_per_s, rel=1e-6)


def test_fit_keeps_alpha_accurate_despite_noise_on_large_messages():
    truth = AlphaBeta(alpha_s=50e-6, beta_bytes_per_s=1e9)
    sizes = [8, 64, 1024, 4 << 20]
    times = [truth.message_time_s(n) for n in sizes]
    times[-1] *= 1.05  # 5% noise on the big message would swamp alpha in an unweighted fit
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_s == pytest.approx(50e-6, rel=0.05)
    assert fit.beta_bytes_per_s == pytest.approx(1e9, rel=0.06)


def test_fit_refuses_what_cannot_be_fitted():
    with pytest.raises(ValueError, match="two distinct"):
        fit_alpha_beta([8, 8], [1e-6, 1e-6])
    with pytest.raises(ValueError, match="does not grow"):
        fit_alpha_beta([8, 1024], [2e-6, 1e-6])
    assert math.isfinite(fit_alpha_beta([8, 1024], [1e-6, 2e-6]).beta_bytes_per_s)


def _shaped_link_one_way_s(n: int) -> float:
    """A 100mbit tbf link's one-way time: a message that fits the 64 KiB bucket leaves at veth
    speed (2 GB/s), the rest at the link's payload rate (100 Mbit/s less tcp/ip headers)."""
    burst, veth, rate = 65536, 2e9, SHAPED_RATE_BYTES_PER_S
    return 450e-6 + min(n, burst) / veth + max(0, n - burst) / rate


SHAPED_RATE_BYTES_PER_S = 100e6 / 8 * 1448 / 1514  # 96 Mbit/s of payload, what streaming measures


def test_fit_takes_beta_from_the_large_messages_on_a_shaped_link():
    """A line through every size took the bucket's speed for the link's (beta 0.4 GB/s here, the
    model 97% short at 4 MiB); the rate of large messages is the slope between them."""
    sizes = [64, 4096, 65536, 1 << 20, 4 << 20]
    times = [_shaped_link_one_way_s(n) for n in sizes]
    fit = fit_alpha_beta(sizes, times)
    assert fit.beta_bytes_per_s == pytest.approx(SHAPED_RATE_BYTES_PER_S, rel=1e-9)
    for n, t in zip(sizes[-2:], times[-2:], strict=True):  # the model meets the large messages
        assert fit.message_time_s(n) == pytest.approx(t, rel=0.10)
    assert fit.message_time_s(64) == pytest.approx(times[0], rel=1e-9)  # and the smallest


def test_fit_of_large_sizes_only_takes_their_intercept():
    truth = AlphaBeta(alpha_s=300e-6, beta_bytes_per_s=12e6)
    sizes = [128 << 10, 256 << 10, 512 << 10]  # every byte term is most of its time
    fit = fit_alpha_beta(sizes, [truth.message_time_s(n) for n in sizes])
    assert fit.alpha_s == pytest.approx(truth.alpha_s, rel=1e-6)
    assert fit.beta_bytes_per_s == pytest.approx(truth.beta_bytes_per_s, rel=1e-9)


def test_fit_takes_beta_from_sizes_within_16x_of_the_largest():
    # 64 KiB is more than 16x below 4 MiB: noise there must not move beta.
    truth = AlphaBeta(alpha_s=20e-6, beta_bytes_per_s=1e9)
    sizes = [64, 65536, 1 << 20, 2 << 20, 4 << 20]
    times = [truth.message_time_s(n) for n in sizes]
    times[1] *= 3
    assert fit_alpha_beta(sizes, times).beta_bytes_per_s == pytest.approx(1e9, rel=1e-9)
    times[2] *= 1.1  # 1 MiB is within 16x of 4 MiB: it counts
    assert fit_alpha_beta(sizes, times).beta_bytes_per_s != pytest.approx(1e9, rel=1e-3)


@pytest.mark.parametrize("num_ranks", [2, 3, 4, 5, 8, 16, 64])
def test_ring_tree_crossover_is_where_the_two_models_meet(num_ranks):
    link = AlphaBeta(5e-6, 50e9)  # the lecture's InfiniBand link
    s = ring_tree_crossover_bytes(link, num_ranks)
    if num_ranks <= 3:
        assert s == 0  # the ring is never slower
        return
    ring = link.allreduce_time_s(s, num_ranks, "ring")
    tree = link.allreduce_time_s(s, num_ranks, "tree")
    assert ring == pytest.approx(tree, rel=1e-12)
    assert link.allreduce_time_s(s / 2, num_ranks, "tree") < link.allreduce_time_s(s / 2, num_ranks, "ring")
    assert link.allreduce_time_s(2 * s, num_ranks, "ring") < link.allreduce_time_s(2 * s, num_ranks, "tree")


def test_ring_tree_crossover_at_8_ranks_on_the_lecture_link():
    # alpha beta = 250 KB; (8 - 1 - 3) / (3 - 7/8) = 32/17
    assert ring_tree_crossover_bytes(AlphaBeta(5e-6, 50e9), 8) == pytest.approx(250e3 * 32 / 17)
