"""Plateau detection on synthetic staircases: levels, where they end, and their names."""

import numpy as np
import pytest

from playground.memlab.levels import detect_levels, find_plateaus, latency_at, matching_level

KIB, MIB = 1024, 1024 * 1024
CACHES = [("L1d", 32 * KIB), ("L2", 1 * MIB), ("L3", 32 * MIB)]


def staircase(sizes, steps):
    """Latency of the first step whose capacity holds the size; steps = [(capacity, ns), ...]."""
    return [next(ns for cap, ns in steps if s <= cap) for s in sizes]


SIZES = [16 * KIB * 2**k for k in range(15)]  # 16 KiB .. 256 MiB


def test_clean_staircase_gives_four_levels_ending_at_each_capacity():
    ns = staircase(SIZES, [(32 * KIB, 1.1), (1 * MIB, 4.0), (32 * MIB, 15.0), (10**12, 100.0)])
    levels = detect_levels(SIZES, ns, CACHES)
    assert [lv.name for lv in levels] == ["L1d", "L2", "L3", "DRAM"]
    assert [lv.latency_ns for lv in levels] == [1.1, 4.0, 15.0, 100.0]
    assert [lv.last_bytes for lv in levels] == [32 * KIB, 1 * MIB, 32 * MIB, 256 * MIB]
    assert [lv.next_bytes for lv in levels] == [64 * KIB, 2 * MIB, 64 * MIB, None]


def test_noise_within_tolerance_does_not_split_a_plateau():
    rng = np.random.default_rng(3)
    clean = staircase(SIZES, [(32 * KIB, 1.0), (1 * MIB, 4.0), (32 * MIB, 15.0), (10**12, 100.0)])
    noisy = [v * (1 + rng.uniform(-0.05, 0.05)) for v in clean]
    levels = detect_levels(SIZES, noisy, CACHES)
    assert [lv.name for lv in levels] == ["L1d", "L2", "L3", "DRAM"]
    for lv, want in zip(levels, [1.0, 4.0, 15.0, 100.0], strict=True):
        assert lv.latency_ns == pytest.approx(want, rel=0.06)


def test_transition_points_belong_to_no_plateau():
    sizes = [16, 32, 64, 128, 256, 512, 1024, 2048]
    ns = [1.0, 1.0, 1.0, 2.0, 2.8, 3.5, 3.6, 3.5]  # 128 and 256 are on the way up
    assert find_plateaus(sizes, ns) == [(0, 2), (5, 7)]


def test_a_second_step_inside_one_cache_is_named_tlb():
    sizes = [16 * KIB, 24 * KIB, 64 * KIB, 128 * KIB, 512 * KIB, 768 * KIB, 4 * MIB, 8 * MIB]
    ns = [1.1, 1.1, 3.9, 3.9, 6.5, 6.6, 16.0, 17.0]
    assert [lv.name for lv in detect_levels(sizes, ns, CACHES)] == ["L1d", "L2", "L2+TLB", "L3"]


def test_single_points_are_not_plateaus():
    assert find_plateaus([1, 2, 4], [1.0, 5.0, 25.0]) == []
    assert detect_levels([1], [1.0]) == []


def test_lengths_must_match():
    with pytest.raises(ValueError, match="differ"):
        find_plateaus([1, 2], [1.0])


def test_latency_at_takes_the_median_inside_the_range():
    assert latency_at([1, 2, 3, 4], [10.0, 1.0, 2.0, 3.0], 2, 4) == 2.0
    assert latency_at([1, 2], [1.0, 2.0], 5, 9) is None


def test_slow_plateaus_are_dram_whatever_the_os_says():
    sizes = [1 * MIB, 2 * MIB, 8 * MIB, 16 * MIB]
    names = [lv.name for lv in detect_levels(sizes, [15.0, 15.5, 140.0, 150.0], CACHES)]
    assert names == ["L3", "DRAM"]  # 16 MiB fits the OS's 32 MiB L3, but 140 ns is memory


def test_matching_level_pairs_overlapping_plateaus():
    ours = detect_levels([16 * KIB, 24 * KIB, 64 * KIB, 128 * KIB], [1.1, 1.1, 4.0, 4.1], CACHES)
    ref = detect_levels(
        [512, 4 * KIB, 8 * KIB, 48 * KIB, 96 * KIB, 192 * KIB], [1.2, 1.2, 1.2, 4.0, 4.0, 4.0], CACHES
    )
    assert [matching_level(lv, ref).latency_ns for lv in ours] == [1.2, 4.0]
    assert matching_level(ours[0], []) is None
