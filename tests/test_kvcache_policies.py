"""Contiguous first-fit and reserve-max: holes, growth, moves, external fragmentation."""

import pytest

from playground.kvcache.engine.allocation import Copy
from playground.kvcache.engine.block_manager import BlockManager
from playground.kvcache.engine.contiguous import ContiguousAllocator
from playground.kvcache.engine.policies import make_policy


def test_first_fit_takes_the_first_hole_that_fits():
    c = ContiguousAllocator(100)
    for s, n in enumerate((10, 20, 30)):
        c.allocate(s, n)
    c.free(1)  # hole [10, 30)
    c.allocate(3, 15)
    assert c.runs[3] == (10, 15)
    c.allocate(4, 25)  # does not fit the 5-slot hole left at 25: goes after run 2
    assert c.runs[4] == (60, 25)
    c.check_invariants()


def test_external_fragmentation_refuses_though_total_free_suffices():
    c = ContiguousAllocator(100)
    for s in range(5):
        c.allocate(s, 20)
    c.free(1)
    c.free(3)  # 40 free in two holes of 20
    st = c.stats()
    assert st["free_slots"] == 40 and st["largest_free_run_slots"] == 20
    assert not c.can_allocate(30)
    with pytest.raises(MemoryError):
        c.allocate(9, 30)
    assert make_policy("paged", 100, 10).can_allocate(30)  # paging has no such hole problem


def test_append_grows_in_place_then_moves_with_a_copy():
    c = ContiguousAllocator(100, growth=1.0)
    c.allocate(0, 10)
    assert c.append(0, 5) == [] and c.runs[0] == (0, 15)  # nothing after it: grows in place
    c.allocate(1, 10)  # [15, 25)
    copies = c.append(0, 5)  # blocked by run 1: moves to the first hole of 20
    assert copies == [Copy(0, 25, 15)] and c.runs[0] == (25, 20)
    assert c.stats()["moved_slots"] == 15
    c.check_invariants()


def test_move_may_reuse_its_own_old_run():
    c = ContiguousAllocator(30, growth=1.0)
    c.allocate(0, 10)
    c.allocate(1, 10)
    c.free(0)  # hole [0, 10), run 1 at [10, 20), hole [20, 30)
    copies = c.append(1, 15)  # needs 25: only [0, 25) with its own run counted free
    assert copies == [Copy(10, 0, 10)] and c.runs[1] == (0, 25)


def test_append_batch_is_all_or_nothing():
    c = ContiguousAllocator(45, growth=1.0)
    for s in range(3):
        c.allocate(s, 10)  # [0,10) [10,20) [20,30), hole [30, 45)
    before = (dict(c.runs), dict(c.seq_lens))
    assert c.can_append(0, 5) and c.can_append(2, 5)  # 0 alone moves to [30, 45), 2 alone grows into it
    assert not c.can_append_batch({0: 5, 2: 5})  # after 0 has moved there, 2 finds no hole of 15
    assert c.append_batch({0: 5, 2: 5}) is None
    assert (c.runs, c.seq_lens) == before
    c.check_invariants()


def test_reserve_max_reserves_up_front_and_refuses_past_it():
    c = make_policy("reserve_max", 1000, max_new_tokens=100)
    c.allocate(0, 50)
    assert c.stats()["allocated_slots"] == 150 and c.stats()["used_slots"] == 50
    assert c.can_append(0, 100) and not c.can_append(0, 101)
    c.allocate(1, 10, max_new_tokens=5)
    assert c.runs[1] == (150, 15)
    assert not c.fits_when_empty(950)


def test_fork_copies_without_pages():
    c = ContiguousAllocator(100)
    c.allocate(0, 30)
    assert c.can_fork(0, 2) and not c.can_fork(0, 3)
    copies = c.fork(0, [1, 2])
    assert copies == [Copy(0, 30, 30), Copy(0, 60, 30)]
    c.check_invariants()


@pytest.mark.parametrize("name", ["paged", "contiguous", "reserve_max"])
def test_every_policy_returns_to_empty(name):
    p = make_policy(name, 4096, 16, max_new_tokens=64)
    for s in range(10):
        p.allocate(s, 20 + s)
    p.append_batch({s: 3 for s in range(10)})
    for s in range(10):
        p.free(s)
    p.check_invariants()
    assert p.stats()["allocated_slots"] == 0 and p.stats()["used_slots"] == 0


def test_unknown_policy_names_the_allowed():
    with pytest.raises(ValueError, match="paged, contiguous, reserve_max"):
        make_policy("buddy", 100)


def test_block_manager_is_the_paged_policy():
    assert isinstance(make_policy("paged", 100, 16), BlockManager)
    assert make_policy("paged", 100, 16).num_blocks == 6
