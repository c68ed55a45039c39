"""The per-step checks: a corrupted result fails the run wherever the bit lands, diverging ranks
are named, and rounding never trips the check."""

import warnings

import numpy as np
import pytest

from playground.comm.faults import FaultyTransport
from playground.comm.world import run_local
from playground.core.errors import ResultMismatch
from playground.training.checks import (
    BLOCK_ELEMENTS,
    Reduction,
    checksum,
    element_sum,
    params_hash,
    tolerance,
    verify_hashes,
    verify_reductions,
)
from playground.training.loop import train_mode
from playground.training.modes import BY_NAME, NAMES
from playground.training.step import TrainSetup
from playground.transformer import AdamConfig, BatchSampler, ModelConfig, lecture_bytes, pin_blas_threads


def test_checksum_in_blocks_matches_float64_sums():
    x = np.random.default_rng(0).standard_normal(3 * BLOCK_ELEMENTS + 17).astype(np.float32)
    total, absolute = checksum(x)
    assert total == pytest.approx(float(np.sum(x, dtype=np.float64)), abs=1e-4)
    assert absolute == pytest.approx(float(np.sum(np.abs(x), dtype=np.float64)), rel=1e-6)
    assert element_sum(x) == total
    assert checksum(np.empty(0, np.float32)) == (0.0, 0.0)


def records_of(per_rank_grads: list[np.ndarray], reduced: np.ndarray) -> list[list]:
    """Every rank's checksums of what it put in, and of the `reduced` result it holds."""
    return [[Reduction("bucket 0", *checksum(g), element_sum(reduced)).to_json()] for g in per_rank_grads]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_rounding_of_a_real_reduction_passes(dtype, n):
    """Any order of float additions stays inside the tolerance (here: ranks summed in reverse, in
    the dtype, as a ring's chunk is)."""
    rng = np.random.default_rng(n)
    grads = [
        (rng.standard_normal(50_000) * 10.0 ** rng.integers(-6, 2, 50_000)).astype(dtype) for _ in range(n)
    ]
    reduced = grads[-1].copy()
    for g in reversed(grads[:-1]):
        reduced += g
    verify_reductions(3, records_of(grads, reduced), ["bucket 0"], np.dtype(dtype), 0)


@pytest.mark.parametrize("flip", [0.0, 1e-3, 1.7, -3.0])
def test_a_flipped_exponent_bit_in_a_result_is_caught(flip):
    """The drill's flip (comm/faults.flip_bit) changes an element by at least 2 or makes it inf."""
    from playground.comm.faults import flip_bit

    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(200_000).astype(np.float32) * 1e-3 for _ in range(4)]
    reduced = sum(grads[1:], grads[0].copy())
    reduced[0] = flip
    flip_bit(reduced)
    with pytest.raises(ResultMismatch, match="step 7 of mode bucketed: the result of bucket 0 was corrupted"):
        verify_reductions(7, records_of(grads, reduced), ["bucket 0"], np.float32, 2, "bucketed")


def test_diverging_ranks_are_named_with_the_step():
    params = [np.zeros(5), np.zeros(5), np.zeros(5), np.zeros(5)]
    params[2][3] = 1e-300
    params[3][0] = -0.0
    hashes = [params_hash(p) for p in params]
    verify_hashes(12, hashes[:2], 1)
    with pytest.raises(
        ResultMismatch,
        match=r"rank 1: step 12 of mode zero1: parameters differ across ranks after the update: ranks 2, 3 ",
    ):
        verify_hashes(12, hashes, 1, "zero1")


def test_a_shard_held_by_one_rank_is_checked_there_only():
    grads = [np.arange(6, dtype=np.float64) * (r + 1) for r in range(3)]
    total = sum(grads)
    names = ["shard 0", "shard 1", "shard 2"]
    records = [
        [
            Reduction(
                name,
                *checksum(g[2 * j : 2 * j + 2]),
                element_sum(total[2 * j : 2 * j + 2]) if j == r else None,
            ).to_json()
            for j, name in enumerate(names)
        ]
        for r, g in enumerate(grads)
    ]
    verify_reductions(0, records, names, np.float64, 0)
    records[1][1][2] += 1.0
    with pytest.raises(ResultMismatch, match="the result of shard 1 was corrupted: .* rank 1 holds"):
        verify_reductions(0, records, names, np.float64, 0)


def test_tolerance_and_hash():
    assert tolerance(4, 2**-24, 1000.0) == pytest.approx(2 * 36 * 2**-24 * 1000)
    a = np.arange(10, dtype=np.float32)
    b = a.copy()
    assert params_hash(a) == params_hash(b) and len(params_hash(a)) == 8
    b.view(np.uint32)[9] ^= 1  # the lowest bit of one element
    assert params_hash(a) != params_hash(b)


# -- the corrupt drill on every message of a short training, in one process ------------------------
CONFIG = ModelConfig(layers=1, d_model=16, heads=2, context=16, dtype="float32")
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, 6, seed=3)
SETUP = TrainSetup(CONFIG, AdamConfig(lr=1e-2), 1, 6 * CONFIG.context, 2048, 512)


def corrupted_run(n: int, mode: str, after_ops: int) -> tuple[bool, BaseException | None]:
    """(the fault fired, what the run raised) with the last rank's post `after_ops + 1` corrupted."""
    faulty = {}

    def wrap(rank, transport):
        if rank != n - 1:
            return transport
        faulty["t"] = FaultyTransport(transport, rank, "corrupt", after_ops)
        return faulty["t"]

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a corrupted gradient is never applied
            run_local(n, lambda comm: train_mode(comm, BY_NAME[mode], SETUP, SAMPLER, 2)[0], wrap=wrap)
    except ResultMismatch as e:
        return not faulty["t"].armed, e
    return not faulty["t"].armed, None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", NAMES)
@pytest.mark.parametrize("n", [2, 3])
def test_a_bit_flipped_in_any_message_fails_the_step(mode, n):
    """Every post of the last rank in turn (all-reduce, reduce-scatter and all-gather segments of
    both steps; the check's own messages are objects, which the drill passes over to the next
    array): each corrupted run fails with a ResultMismatch, and once the post number is past the
    last array the drill never fires and the run passes. Measured: 2 ranks, per_tensor 65 posts,
    bucketed 33, after_backward 5, zero1 5 (the all-gather's flips caught by the hash)."""
    with pin_blas_threads(1):
        after_ops = 0
        while True:
            fired, error = corrupted_run(n, mode, after_ops)
            if not fired:
                assert error is None
                break
            assert error is not None, f"{mode}, {n} ranks: the flip at post {after_ops + 1} went unnoticed"
            after_ops += 1
    assert after_ops >= 4
