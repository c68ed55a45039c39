"""Every formula of playground.models.costs against values worked out by hand, the lecture's own
numbers (exercise 11, section 5.3), and the model's choice of algorithm."""

import math

import pytest

from playground.collectives.registry import REGISTRY, best_algorithm, collective_time_s, flat_allreduce
from playground.models import costs
from playground.models.costs import PRESETS, Link

IB = PRESETS["ib"]  # the lecture's InfiniBand: alpha 5 us, 50 GB/s
# A link with round numbers: 1 MB (1e6 bytes) takes 1000 us on the wire and 500 us to reduce,
# every message 10 us more. Hand values below are in us, for S = 1 MB.
HAND = Link(alpha_s=10e-6, beta_bytes_per_s=1e9, gamma_bytes_per_s=2e9)
S = 1e6


def us(seconds: float) -> float:
    return seconds * 1e6


# -- the lecture ---------------------------------------------------------------------------------


def test_exercise_11_one_megabyte_in_50_us_and_half_bandwidth_at_250_kb():
    link = Link(alpha_s=10e-6, beta_bytes_per_s=25e9)
    assert us(costs.p2p_time_s(1e6, link)) == pytest.approx(50.0)  # 10 us + 1 MB / 25 GB/s = 10 + 40
    assert 1e6 / costs.p2p_time_s(1e6, link) == pytest.approx(20e9)  # 20 GB/s effective, 80% of peak
    assert link.half_bandwidth_bytes == pytest.approx(250e3)  # 10 us x 25 GB/s
    n = link.half_bandwidth_bytes
    assert n / costs.p2p_time_s(n, link) == pytest.approx(link.beta_bytes_per_s / 2)


def test_section_5_3_per_tensor_sends_against_one_bucket_on_infiniband():
    tensors = [100e3] * 1000  # 1000 x 100 KB = 100 MB
    assert costs.sends_time_s(tensors, IB) == pytest.approx(7e-3)  # 1000 x (5 us + 2 us)
    assert costs.sends_time_s([sum(tensors)], IB) == pytest.approx(2.005e-3)  # 5 us + 100 MB / 50 GB/s
    # the same through a 4-rank ring all-reduce: 1000 x 6 x (5 us + 25 KB / 50 GB/s) = 33 ms, one
    # bucket 6 x (5 us + 25 MB / 50 GB/s) = 3.03 ms: the 5994 alphas saved are the difference
    per_tensor = sum(costs.allreduce_ring_time_s(n, 4, IB) for n in tensors)
    assert per_tensor == pytest.approx(33e-3)
    assert costs.allreduce_ring_time_s(100e6, 4, IB) == pytest.approx(3.03e-3)


def test_lecture_1_kb_on_infiniband_uses_0_4_percent_of_the_peak():
    assert 1e3 / costs.p2p_time_s(1e3, IB) / IB.beta_bytes_per_s == pytest.approx(0.004, rel=0.01)


# -- every formula, by hand ------------------------------------------------------------------------
# N = 5 is the non-power of two: L = ceil(log2 5) = 3, p = 4, fold = 2 x 1010 + 500 = 2520 us.

HAND_US = {
    # 2(N-1) 10 + 2(N-1)/N 1000 + (N-1)/N 500
    ("allreduce", "ring"): {
        2: 20 + 1000 + 250,
        4: 60 + 1500 + 375,
        8: 140 + 1750 + 437.5,
        5: 80 + 1600 + 400,
    },
    # L (10 + 1000 + 500) + L (10 + 1000) = 2520 L
    ("allreduce", "tree"): {2: 2520, 4: 5040, 8: 7560, 5: 7560},
    # 2 log2(p) 10 + 2 (p-1)/p 1000 + (p-1)/p 500 (+ 2520 at N = 5)
    ("allreduce", "hd"): {2: 20 + 1000 + 250, 4: 40 + 1500 + 375, 8: 60 + 1750 + 437.5, 5: 1915 + 2520},
    # on one node, hierarchical is reduce-scatter + all-gather inside it: the ring's numbers
    ("allreduce", "hier"): {
        2: 20 + 1000 + 250,
        4: 60 + 1500 + 375,
        8: 140 + 1750 + 437.5,
        5: 80 + 1600 + 400,
    },
    # log2(p) (10 + 1000 + 500) (+ 2520 at N = 5)
    ("allreduce", "rd"): {2: 1510, 4: 3020, 8: 4530, 5: 3020 + 2520},
    # (N-1) (10 + 1000/N + 500/N)
    ("reduce_scatter", "ring"): {2: 760, 4: 3 * 385, 8: 7 * 197.5, 5: 4 * 310},
    # (N-1) (10 + 1000/N), S the gathered output
    ("allgather", "ring"): {2: 510, 4: 3 * 260, 8: 7 * 135, 5: 4 * 210},
    # L (10 + 1000)
    ("broadcast", "tree"): {2: 1010, 4: 2020, 8: 3030, 5: 3030},
    # L (10 + 1000 + 500)
    ("reduce", "tree"): {2: 1510, 4: 3020, 8: 4530, 5: 4530},
    # (N-1) (10 + 1000/N), S each rank's input
    ("alltoall", "pairwise"): {2: 510, 4: 3 * 260, 8: 7 * 135, 5: 4 * 210},
    # sum_k (10 + B_k 1000/N): B = [1], [2, 2], [4, 4, 4], and at N = 5 [2, 2, 1] (indices 1,3; 2,3; 4)
    ("alltoall", "bruck"): {2: 510, 4: 2 * 510, 8: 3 * 510, 5: 410 + 410 + 210},
    # 10 + 3(N-1) 1000/N (one block at N = 2): the ports' queues
    ("alltoall", "scattered"): {2: 510, 4: 10 + 9 * 250, 8: 10 + 21 * 125, 5: 10 + 12 * 200},
    ("alltoallv", "pairwise"): {2: 510, 4: 3 * 260, 8: 7 * 135, 5: 4 * 210},
    ("alltoallv", "scattered"): {2: 510, 4: 10 + 9 * 250, 8: 10 + 21 * 125, 5: 10 + 12 * 200},
    # 10 + (N-1) 1000/N: one port takes every block
    ("gather", "linear"): {2: 510, 4: 760, 8: 885, 5: 810},
    ("scatter", "linear"): {2: 510, 4: 760, 8: 885, 5: 810},
    # sum_{k<L} (10 + 2^k 1000/N)
    ("gather", "tree"): {2: 510, 4: 260 + 510, 8: 135 + 260 + 510, 5: 210 + 410 + 810},
    ("scatter", "tree"): {2: 510, 4: 260 + 510, 8: 135 + 260 + 510, 5: 210 + 410 + 810},
    # 10 + 1000
    ("sendrecv", "ring"): {2: 1010, 4: 1010, 8: 1010, 5: 1010},
}


@pytest.mark.parametrize("key", list(HAND_US), ids=lambda k: f"{k[0]}-{k[1]}")
@pytest.mark.parametrize("num_ranks", [2, 4, 8, 5])
def test_formula_against_hand_computed_values(key, num_ranks):
    collective, algorithm = key
    got = collective_time_s(collective, algorithm, S, num_ranks, HAND)
    assert us(got) == pytest.approx(HAND_US[key][num_ranks])
    assert next(a.cost for a in REGISTRY if (a.collective, a.name) == key)(S, num_ranks, HAND) == got


def test_every_collective_algorithm_has_a_formula():
    from playground.collectives import ALGORITHMS

    offered = {(c, a) for c, algos in ALGORITHMS.items() for a in algos if a != "auto"}
    assert offered == {(a.collective, a.name) for a in REGISTRY} == set(HAND_US)


@pytest.mark.parametrize("num_ranks", [2, 3, 4, 5, 8, 13, 64, 1024])
def test_compositions_match_the_code_structure(num_ranks):
    """The ring all-reduce is its reduce-scatter then its all-gather; the tree all-reduce is its
    reduce then its broadcast; gamma = inf removes exactly the reduction terms."""
    t = lambda name, link=HAND: collective_time_s(*name.split(), S, num_ranks, link)  # noqa: E731
    assert t("allreduce ring") == pytest.approx(t("reduce_scatter ring") + t("allgather ring"))
    assert t("allreduce tree") == pytest.approx(t("reduce tree") + t("broadcast tree"))
    free = Link(HAND.alpha_s, HAND.beta_bytes_per_s)
    assert t("allreduce ring") - t("allreduce ring", free) == pytest.approx(
        (num_ranks - 1) / num_ranks * 500e-6
    )
    levels = math.ceil(math.log2(num_ranks))
    assert t("allreduce tree", free) == pytest.approx(2 * levels * 1010e-6)


def test_fold_only_when_not_a_power_of_two():
    assert costs.fold_time_s(S, 8, HAND) == 0.0
    assert us(costs.fold_time_s(S, 6, HAND)) == pytest.approx(2520)
    assert costs.allreduce_hd_time_s(S, 7, HAND) == pytest.approx(
        costs.allreduce_hd_time_s(S, 4, HAND) + 2520e-6
    )
    # 1024 ranks: 20 alphas of halving-doubling against 2046 of the ring
    assert us(costs.allreduce_hd_time_s(8, 1024, Link(1e-6, math.inf))) == pytest.approx(20)
    assert us(costs.allreduce_ring_time_s(8, 1024, Link(1e-6, math.inf))) == pytest.approx(2046)


def test_nothing_to_do_costs_nothing():
    for key, formula in ((a.name, a.cost) for a in REGISTRY):
        assert formula(S, 1, HAND) == 0.0, key  # one rank: every algorithm returns at once
        assert formula(0, 8, HAND) == 0.0, key  # no data: likewise


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="num_ranks"):
        costs.allreduce_ring_time_s(S, 0, HAND)
    with pytest.raises(ValueError, match="size_bytes"):
        costs.allreduce_ring_time_s(-1, 4, HAND)
    with pytest.raises(ValueError, match="algorithm: no formula for allgather 'tree'"):
        collective_time_s("allgather", "tree", S, 4, HAND)
    for bad, field in (
        ((-1e-6, 1e9), "alpha_s"),
        ((math.nan, 1e9), "alpha_s"),
        ((1e-6, 0), "beta_bytes_per_s"),
        ((1e-6, 1e9, 0), "gamma_bytes_per_s"),
    ):
        with pytest.raises(ValueError, match=field):
            Link(*bad)


# -- the model's choice ----------------------------------------------------------------------------


def test_best_algorithm_on_the_lecture_link():
    # 8 B on 8 ranks: alphas decide; rd has 3 (ring 14, tree 6, hd 6)
    assert best_algorithm(8, 8, IB) == "rd"
    # 100 MB on 8 ranks: hd moves the ring's bytes with 6 alphas instead of 14
    assert best_algorithm(100e6, 8, IB) == "hd"
    # 100 MB on 6 ranks: hd's fold moves 2 x 100 MB more; the ring wins
    assert best_algorithm(100e6, 6, IB) == "ring"
    # 2 ranks: ring and hd are the same schedule; the tie goes to the first listed
    assert best_algorithm(1e6, 2, HAND) == "ring"
    assert best_algorithm(1e6, 2, HAND, algorithms=("hd", "ring")) == "hd"


def test_best_algorithm_is_the_minimum():
    for n in (2, 3, 5, 8, 12, 64, 1024):
        for size in (8, 4096, 1 << 20, 64 << 20):
            pick = best_algorithm(size, n, HAND)
            times = [collective_time_s("allreduce", a, size, n, HAND) for a in flat_allreduce()]
            assert collective_time_s("allreduce", pick, size, n, HAND) == pytest.approx(min(times))


def test_presets_and_their_description():
    assert set(PRESETS) == {"ib", "roce", "ethernet", "nvlink"}
    assert (IB.alpha_s, IB.beta_bytes_per_s, IB.gamma_bytes_per_s) == (5e-6, 50e9, math.inf)
    assert IB.describe() == "alpha 5 us, beta 50 GB/s"
    assert HAND.describe() == "alpha 10 us, beta 1 GB/s, gamma 2 GB/s"
    for link in PRESETS.values():
        assert link.alpha_s > 0 and link.beta_bytes_per_s >= 12.5e9


def test_hierarchical_carries_a_kth_of_the_bytes_between_nodes():
    """16 nodes x 8 ranks, NVLink inside and InfiniBand between, 1 GB: by hand."""
    nv, ib, size = PRESETS["nvlink"], IB, 1e9
    inside = 7 * (nv.alpha_s + size / 8 / nv.beta_bytes_per_s)  # reduce-scatter (gamma free)
    across = 2 * 15 * (ib.alpha_s + size / 8 / 16 / ib.beta_bytes_per_s)  # ring on S/8 over 16 nodes
    assert costs.allreduce_hier_time_s(size, 16, 8, nv, ib) == pytest.approx(2 * inside + across)
    flat_ring = costs.allreduce_ring_time_s(size, 128, ib)
    assert costs.allreduce_hier_time_s(size, 16, 8, nv, ib) < flat_ring / 4  # 8.8 ms against 41 ms


def test_bruck_crossover_is_where_the_pairwise_exchange_catches_up():
    from playground.models import exchange_costs

    for n in (4, 5, 8, 64, 1024):
        s_star = exchange_costs.bruck_crossover_bytes(n, HAND)
        t = lambda algo, s, n=n: collective_time_s("alltoall", algo, s, n, HAND)  # noqa: E731
        assert t("bruck", s_star) == pytest.approx(t("pairwise", s_star))
        assert t("bruck", s_star / 2) < t("pairwise", s_star / 2)
        assert t("bruck", s_star * 2) > t("pairwise", s_star * 2)
    # 8 ranks: (7 - 3) alpha / ((12 - 7) / 8 / beta) = 40 us x 1.6 GB/s = 64 kB
    assert exchange_costs.bruck_crossover_bytes(8, HAND) == pytest.approx(64e3)
    assert exchange_costs.bruck_crossover_bytes(2, HAND) is None  # one message either way
    assert exchange_costs.bruck_crossover_bytes(3, HAND) is None  # two messages either way
