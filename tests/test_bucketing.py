"""Bucket planning, a bucket's slice of a flat buffer, real architectures' gradient lists, and the
exact-sum gradients."""

import numpy as np
import pytest

from playground.buckets.architectures import ARCHITECTURES, backward_order
from playground.buckets.gradients import count_wrong_sums, make_base, rank_gradient, sum_factor
from playground.collectives.bucketing import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    MIB,
    plan_buckets,
)


def contents(buckets):
    return [list(b.tensor_indices) for b in buckets]


# -- plan_buckets -----------------------------------------------------------------------------
def test_order_is_kept_and_every_tensor_is_in_exactly_one_bucket():
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    buckets = plan_buckets(sizes, cap_bytes=10)
    flat = [i for b in buckets for i in b.tensor_indices]
    assert flat == list(range(len(sizes)))
    assert [b.index for b in buckets] == list(range(len(buckets)))
    assert [b.num_bytes for b in buckets] == [sum(sizes[i] for i in b.tensor_indices) for b in buckets]


def test_cap_is_never_exceeded_by_a_bucket_of_several_tensors():
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    assert contents(plan_buckets(sizes, cap_bytes=10)) == [[0, 1, 2, 3], [4], [5], [6, 7]]


def test_bucket_that_exactly_fills_the_cap_is_closed_at_the_next_tensor():
    assert contents(plan_buckets([5, 5, 5, 5], cap_bytes=10)) == [[0, 1], [2, 3]]


def test_tensor_larger_than_the_cap_gets_its_own_bucket():
    buckets = plan_buckets([2, 2, 50, 2, 2], cap_bytes=10)
    assert contents(buckets) == [[0, 1], [2], [3, 4]]
    assert buckets[1].num_bytes == 50
    assert contents(plan_buckets([50], cap_bytes=10)) == [[0]]
    assert contents(plan_buckets([50, 60], cap_bytes=10)) == [[0], [1]]


def test_first_bucket_has_its_own_smaller_cap_like_ddp():
    sizes = [4, 4, 4, 4, 4, 4, 4]
    assert contents(plan_buckets(sizes, cap_bytes=12, first_cap_bytes=4)) == [[0], [1, 2, 3], [4, 5, 6]]
    assert contents(plan_buckets(sizes, cap_bytes=12)) == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("close_at_cap", [False, True])
def test_extremes_are_caps_zero_is_per_tensor_none_is_one_bucket(close_at_cap):
    sizes = [7, 0, 0, 3]
    assert contents(plan_buckets(sizes, 0, close_at_cap=close_at_cap)) == [[0], [1], [2], [3]]
    (one,) = plan_buckets(sizes, None, first_cap_bytes=1, close_at_cap=close_at_cap)  # no cap, no first
    assert list(one.tensor_indices) == [0, 1, 2, 3] and one.num_bytes == 10
    assert plan_buckets([], cap_bytes=10, close_at_cap=close_at_cap) == []
    assert plan_buckets([], None) == []


def test_ddps_rule_closes_a_bucket_once_it_reaches_the_cap():
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    assert contents(plan_buckets(sizes, 10, close_at_cap=True)) == [[0, 1, 2, 3, 4], [5, 6], [7]]
    assert contents(plan_buckets(sizes, 10, 4, close_at_cap=True)) == [[0, 1], [2, 3, 4], [5, 6], [7]]


def test_offsets_and_views_slice_one_flat_buffer_in_either_order():
    sizes = [8, 4, 12, 4, 16]  # bytes of float32 tensors, backward order
    buckets = plan_buckets(sizes, 12)
    assert [(b.offset_bytes, b.num_bytes) for b in buckets] == [(0, 12), (12, 12), (24, 4), (28, 16)]
    backward = np.arange(sum(sizes) // 4, dtype=np.float32)
    views = [b.view(backward) for b in buckets]
    assert [v.tolist() for v in views] == [[0, 1, 2], [3, 4, 5], [6], [7, 8, 9, 10]]
    assert all(np.shares_memory(v, backward) for v in views)  # views, no copies
    forward = backward[::-1].copy()  # the same tensors in the parameters' order: a model's buffer
    for b, v in zip(buckets, views, strict=True):
        assert sorted(b.view(forward, forward=True).tolist()) == v.tolist()


def test_last_tensor_marks_when_a_bucket_is_ready():
    b = plan_buckets([1, 1, 1, 1, 1], cap_bytes=2)
    assert [x.last for x in b] == [1, 3, 4]


def test_negative_inputs_are_refused():
    with pytest.raises(ValueError, match="cap_bytes"):
        plan_buckets([1], cap_bytes=-1)
    with pytest.raises(ValueError, match="first_cap_bytes"):
        plan_buckets([1], cap_bytes=1, first_cap_bytes=-5)
    with pytest.raises(ValueError, match=r"tensor_bytes\[1\]"):
        plan_buckets([1, -2], cap_bytes=1)


def test_ddp_caps_are_ddps():
    # torch/nn/parallel/distributed.py: bucket_cap_mb=25 is MiB (25 * 1024 * 1024), and
    # dist._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
    assert (MIB, DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES) == (1_048_576, 26_214_400, 1_048_576)


def test_lecture_gradients_in_ddp_buckets():
    sizes = [100_000] * 1000  # 1000 x 100 KB
    buckets = plan_buckets(sizes, DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES)
    assert [b.num_tensors for b in buckets] == [10, 262, 262, 262, 204]  # 1,048,576 // 100,000 = 10, ...
    assert [b.num_bytes for b in buckets] == [1_000_000, 26_200_000, 26_200_000, 26_200_000, 20_400_000]
    assert buckets[0].num_tensors == MIB // 100_000  # 10 tensors fit in the first 1 MiB
    assert buckets[1].num_tensors == DDP_BUCKET_CAP_BYTES // 100_000  # 262 in 25 MiB
    assert sum(b.num_tensors for b in buckets) == 1000
    assert len(buckets) == 5
    assert all(b.num_bytes <= DDP_BUCKET_CAP_BYTES for b in buckets)


# -- architectures ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "num_params", "num_tensors"),
    [
        ("resnet50", 25_557_032, 161),
        ("gpt2", 124_439_808, 148),
        ("lecture", 25_000_000, 1000),
    ],
)
def test_architecture_parameter_counts(name, num_params, num_tensors):
    tensors = backward_order(name)
    assert sum(t.num_elements for t in tensors) == num_params
    assert len(tensors) == num_tensors


def test_backward_order_starts_at_the_last_layer():
    resnet = backward_order("resnet50")
    assert [t.name for t in resnet[:2]] == ["fc.bias", "fc.weight"]
    assert resnet[-1].name == "conv1.weight" and resnet[-1].shape == (64, 3, 7, 7)
    gpt2 = backward_order("gpt2")
    assert gpt2[0].name == "transformer.ln_f.bias"
    assert gpt2[-1].name == "transformer.wte.weight" and gpt2[-1].shape == (50257, 768)
    assert not any("lm_head" in t.name for t in gpt2)  # tied to wte


def test_gpt2_embedding_is_larger_than_the_ddp_cap_and_gets_its_own_bucket():
    sizes = [t.num_bytes() for t in backward_order("gpt2")]
    buckets = plan_buckets(sizes, DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES)
    assert buckets[-1].num_tensors == 1 and buckets[-1].num_bytes == 50257 * 768 * 4
    assert all(b.num_bytes <= DDP_BUCKET_CAP_BYTES for b in buckets if b.num_tensors > 1)


def test_unknown_architecture_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: " + ", ".join(ARCHITECTURES)):
        backward_order("vgg")


# -- gradients with an exact sum --------------------------------------------------------------
def test_gradients_sum_exactly_in_any_order():
    num_ranks = 7
    base = make_base(10_000, seed=3)
    assert np.all(base != 0) and np.all(np.abs(base) <= 8)
    grads = [rank_gradient(base, r) for r in range(num_ranks)]
    forward = np.zeros_like(base)
    for g in grads:
        forward += g
    backward = np.zeros_like(base)
    for g in reversed(grads):
        backward += g
    assert np.array_equal(forward, backward)
    for r in range(num_ranks):
        assert count_wrong_sums(forward, grads[r], r, num_ranks) == 0
    assert sum_factor(num_ranks) == 28


def test_count_wrong_sums_sees_a_missing_or_swapped_contribution():
    base = make_base(1000, seed=1)
    grads = [rank_gradient(base, r) for r in range(3)]
    assert count_wrong_sums(grads[0] + grads[1], grads[0], 0, 3) == 1000
    total = grads[0] + grads[1] + grads[2]
    swapped = total.copy()
    swapped[[10, 20]] = swapped[[20, 10]]
    assert count_wrong_sums(swapped, grads[2], 2, 3) == int(base[10] != base[20]) * 2
    assert count_wrong_sums(total[:5], grads[0], 0, 3) == 1000
