"""The C module on tiny inputs: checksums equal what numpy computes, lists are one cycle."""

import threading
import time

import numpy as np
import pytest

from playground.core.native import load_native
from playground.memlab import chase

native = load_native()


def linked(order: np.ndarray, slot_bytes: int = 64) -> tuple[np.ndarray, int]:
    buf = np.zeros(order.size * slot_bytes // 8, dtype=np.uint64)
    return buf, native.link_chain(buf, order, slot_bytes)


@pytest.mark.parametrize("num_slots", [2, 3, 64, 1000])
def test_random_order_is_one_cycle(num_slots):
    order = chase.cycle_order(num_slots, np.random.default_rng(num_slots))
    assert chase.is_single_cycle(order)


def test_page_grouped_order_is_one_cycle_and_stays_in_each_page():
    order = chase.page_grouped_order(64 * 5 + 7, 64, np.random.default_rng(1))
    assert chase.is_single_cycle(order)
    pages = order[: 64 * 5] // 64
    assert all(len(set(pages[k * 64 : (k + 1) * 64])) == 1 for k in range(5))  # a page at a time
    assert sorted(order[64 * 5 :]) == list(range(320, 327))  # the partial page comes last


def test_is_single_cycle_rejects_two_cycles_and_repeats():
    assert not chase.is_single_cycle(np.array([0, 0, 1], dtype=np.int64))
    assert not chase.is_single_cycle(np.array([0, 2], dtype=np.int64))
    assert chase.is_single_cycle(np.array([2, 0, 1], dtype=np.int64))


@pytest.mark.parametrize("num_loads", [100, 700, 1234])
def test_chase_ends_where_the_order_says(num_loads):
    order = chase.cycle_order(37, np.random.default_rng(7))
    buf, start = linked(order)
    assert start == order[0] * 64
    ns, end, overhead = native.chase(buf, start, num_loads, 2, 300)
    walked = 300 + 2 * ((num_loads + 99) // 100 * 100)  # warm-up, then 2 repeats going on; 100x unroll
    assert end == order[walked % order.size] * 64
    assert len(ns) == 2 and all(t > 0 for t in ns) and overhead >= 0


def test_link_chain_writes_absolute_pointers_to_the_next_slot():
    order = np.array([2, 0, 3, 1], dtype=np.int64)
    buf, _ = linked(order, 16)
    base = buf.ctypes.data
    words = buf.reshape(-1, 2)[:, 0]
    assert [int(words[s]) - base for s in (2, 0, 3, 1)] == [0, 48, 16, 32]


def test_link_chain_refuses_slots_outside_the_buffer():
    buf = np.zeros(16, dtype=np.uint64)
    with pytest.raises(ValueError, match="outside"):
        native.link_chain(buf, np.array([0, 5], dtype=np.int64), 64)
    with pytest.raises(ValueError, match="slot_bytes"):
        native.link_chain(buf, np.array([0, 1], dtype=np.int64), 12)


def test_chase_refuses_a_start_outside_the_buffer():
    buf = np.zeros(16, dtype=np.uint64)
    with pytest.raises(ValueError, match="start_offset"):
        native.chase(buf, 4096, 100)


@pytest.mark.parametrize("stride", [1, 3, 8, 16, 100])
def test_strided_sum_equals_numpy(stride):
    a = (np.arange(1000) % 7).astype(np.float32)
    times, checksum = native.strided_sum(a, stride, 3)
    assert checksum == float(a[::stride].sum(dtype=np.float64))
    assert len(times) == 3


def test_strided_sum_refuses_other_dtypes():
    with pytest.raises(TypeError, match="4 bytes"):
        native.strided_sum(np.ones(10), 1)


def test_gather_copies_and_sums():
    src = np.arange(10, dtype=np.float32)
    idx = np.array([9, 0, 3, 3], dtype=np.int64)
    out = np.zeros(4, dtype=np.float32)
    times, checksum = native.gather(src, idx, out, 2)
    assert out.tolist() == [9, 0, 3, 3] and checksum == 15.0 and len(times) == 2


def test_gather_checks_indices_and_lengths():
    src = np.arange(10, dtype=np.float32)
    with pytest.raises(IndexError, match="idx\\[1\\]"):
        native.gather(src, np.array([0, 10], dtype=np.int64), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="out"):
        native.gather(src, np.array([0, 1], dtype=np.int64), np.zeros(3, np.float32))


def test_chase_releases_the_gil():
    """While a long chase runs in a thread, the main thread keeps running Python code."""
    order = chase.cycle_order(256, np.random.default_rng(0))
    buf, start = linked(order)
    window = {}

    def run():
        window["t0"] = time.perf_counter()
        native.chase(buf, start, 20_000_000, 5, 0)  # ~0.1 s of loads
        window["t1"] = time.perf_counter()

    t = threading.Thread(target=run)
    stamps = []
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
    t.join()
    t0, t1 = window["t0"], window["t1"]
    middle = [s for s in stamps if t0 + 0.2 * (t1 - t0) < s < t1 - 0.2 * (t1 - t0)]
    assert middle, "the main thread never ran while chase() was running: the GIL was held"


def test_measure_point_reports_a_positive_latency():
    buf = chase.ChaseBuffer(64 * 1024, huge_pages=False)
    try:
        p = chase.measure_point(buf, 16 * 1024, min_loads=1000, repeats=2)
        assert p.ns_per_load > 0 and p.ns_min <= p.ns_per_load <= p.ns_max
    finally:
        buf.close()


def test_working_sets_double_and_align():
    sizes = chase.working_sets(16 * 1024, 256 * 1024, 2)
    assert sizes[0] == 16 * 1024 and sizes[-1] == 256 * 1024
    assert all(s % 4096 == 0 for s in sizes) and sizes == sorted(set(sizes))
    assert 16 * 1024 * 2 in sizes and len(sizes) == 9


def test_thrash_order_is_lat_mem_rd_t_and_one_cycle():
    assert chase.bit_reversed(8).tolist() == [0, 4, 2, 6, 1, 5, 3, 7]
    order = chase.thrash_order(4 * 8, 8, np.random.default_rng(2))
    assert chase.is_single_cycle(order)
    pages = order // 8
    assert len(set(pages[:4].tolist())) == 4  # each load on another page
    assert (pages[:4] == pages[4:8]).all()  # the same page cycle every round
    assert [int(x) % 8 for x in order[:4]] == [0, 4, 2, 6]  # page k at line bitrev((k + 0) % 8)
