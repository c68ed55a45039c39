"""Synthetic gradients whose all-reduced sum is known exactly, so every rank can check it.

Rank r holds `base * (r + 1)`, where `base` is the same on every rank: random non-zero small
integers stored as float32. Every partial sum is then an integer far below 2**24, so float32
addition is exact in *any* order (ring, tree, per tensor, per bucket) and the all-reduced sum
must equal numpy's `base * N(N+1)/2` bit for bit. A bucket that mixes up tensors, drops a
rank's contribution or adds one twice changes the result; a rounding difference cannot hide it.
"""

import numpy as np

MAX_ABS_BASE = 8


def make_base(num_elements: int, seed: int) -> np.ndarray:
    """float32 integers in [-8, -1] U [1, 8], identical on every rank for the same seed."""
    rng = np.random.default_rng(seed)
    magnitude = rng.integers(1, MAX_ABS_BASE + 1, size=num_elements, dtype=np.int8)
    sign = rng.integers(0, 2, size=num_elements, dtype=np.int8) * 2 - 1
    return (magnitude * sign).astype(np.float32)


def rank_gradient(base: np.ndarray, rank: int) -> np.ndarray:
    """What rank `rank` contributes: base * (rank + 1)."""
    return base * np.float32(rank + 1)


def sum_factor(num_ranks: int) -> int:
    """1 + 2 + ... + N: the all-reduced sum is base times this."""
    return num_ranks * (num_ranks + 1) // 2


def expected_sum(own_gradient: np.ndarray, rank: int, num_ranks: int) -> np.ndarray:
    """numpy's exact sum of every rank's gradient, rebuilt from this rank's own (own / (rank+1) is
    exactly the base), so the check needs no copy of the base and no data from other ranks."""
    return (own_gradient / np.float32(rank + 1)) * np.float32(sum_factor(num_ranks))


def count_wrong_sums(result: np.ndarray, own_gradient: np.ndarray, rank: int, num_ranks: int) -> int:
    """Elements of an all-reduced `result` that differ from `expected_sum`."""
    if result.shape != own_gradient.shape:
        return max(result.size, own_gradient.size)
    return int(np.count_nonzero(result != expected_sum(own_gradient, rank, num_ranks)))
