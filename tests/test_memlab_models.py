"""Translation, allocation and page-size models on hand-checked cases (seed §4.1, 4.3, 4.4)."""

import pytest

from playground.memlab.pagesize import pages_and_waste, tradeoff
from playground.memlab.translation import PageFault, PageTable, parse_address, translate_all
from playground.models.allocation import ContiguousAllocator, PagedAllocator, make_workload, run_workload


def test_exercise_8():
    table = PageTable(16 * 1024, {3: 77})
    assert table.split(0xC123) == (3, 0x123)
    assert table.translate(0xC123) == 0x134123


def test_neighbouring_addresses_can_land_far_apart_and_processes_differ():
    a, b = PageTable(0x4000, {0: 12, 1: 40}), PageTable(0x4000, {0: 5})
    rows = translate_all({"A": a, "B": b}, [("A", 0x3FFF), ("A", 0x4000), ("B", 0x3FFF)])
    assert [r.physical_address for r in rows] == [12 * 0x4000 + 0x3FFF, 40 * 0x4000, 5 * 0x4000 + 0x3FFF]


def test_unmapped_page_faults():
    table = PageTable(4096, {0: 1})
    with pytest.raises(PageFault, match="virtual page 2"):
        table.translate(0x2000)
    (row,) = translate_all({"P": table}, [("P", 0x2000)])
    assert row.pfn is None and row.physical_address is None


def test_page_size_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        PageTable(3000, {})


def test_parse_address():
    assert parse_address("0xC123") == 0xC123 and parse_address("10") == 10 and parse_address(7) == 7


def test_first_fit_takes_the_first_hole_and_merges_on_free():
    a = ContiguousAllocator(100)
    assert [a.allocate(i, 20) for i in range(5)] == [0, 20, 40, 60, 80]
    a.free(1)
    a.free(3)
    assert a.holes == [(20, 20), (60, 20)]
    assert a.allocate(10, 15) == 20  # first fit, not best fit
    a.free(2)  # 40..60 joins the 35..40 remainder and the 60..80 hole
    assert a.holes == [(35, 45)]


def test_external_fragmentation_failure_leaves_state_unchanged():
    a = ContiguousAllocator(100)
    for i in range(5):
        a.allocate(i, 20)
    a.free(1)
    a.free(3)
    assert a.free_units() == 40 and a.largest_hole() == 20
    assert not a.can_allocate(30)
    with pytest.raises(ValueError):
        a.allocate(9, 30)
    assert a.holes == [(20, 20), (60, 20)] and 9 not in a.blocks


def test_first_fit_counts_an_ignored_run_free_and_knows_the_room_after_a_run():
    """What the KV cache's contiguous policy builds moves and growth on."""
    a = ContiguousAllocator(100)
    for i in range(3):
        a.allocate(i, 20)  # [0,20) [20,40) [40,60), hole [60,100)
    a.free(0)
    assert a.first_fit(30) == 60 and a.first_fit(30, ignore=1) == 0  # 1's run counted free: [0, 40)
    assert a.room_after(1) == 20 and a.room_after(2) == 60
    trial = a.copy()
    trial.remove(2)
    trial.place(2, 70, 10)
    assert a.blocks[2] == (40, 20) and a.holes == [(0, 20), (60, 40)]  # the copy is independent
    assert trial.holes == [(0, 20), (40, 30), (80, 20)] and trial.used_units() == 30
    with pytest.raises(ValueError, match="already placed"):
        a.place(1, 80, 5)
    a.check_invariants()
    trial.check_invariants()


def test_paged_allocation_needs_no_adjacent_pages_and_wastes_the_last_page_tail():
    p = PagedAllocator(100, 16)  # 6 pages
    p.allocate(0, 20)  # 2 pages, 12 units wasted
    p.allocate(1, 33)  # 3 pages, 15 wasted
    assert p.internal_waste_units() == 27 and len(p.free_pages) == 1
    p.free(0)
    assert p.can_allocate(40) and not p.can_allocate(49)


def test_workload_failures_are_classified():
    workload = make_workload(4000, 20, 399, seed=0)
    contiguous = run_workload(ContiguousAllocator(10_000), "contiguous", workload, 10_000)
    paged = run_workload(PagedAllocator(10_000, 16), "paged", workload, 10_000)
    assert any(f.cause == "external fragmentation" for f in contiguous.failures)
    assert paged.failures and all(f.cause == "out of space" for f in paged.failures)
    row = paged.row(10_000)
    assert 1.0 < row["internal_frag_pct"] < 6.0  # about half of 16 units over blocks of ~210


def test_exercise_9():
    assert pages_and_waste(700, 16) == (44, 4)
    assert pages_and_waste(700, 256) == (3, 68)


def test_tradeoff_rows():
    rows = tradeoff([1, 16, 17], [1, 16])
    assert (rows[0].pages, rows[0].waste_units) == (34, 0)
    assert (rows[1].pages, rows[1].waste_units, rows[1].page_table_bytes) == (4, 30, 32)
