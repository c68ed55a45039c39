"""BlockManager (paged, vLLM's nouns): refcounts, fork, copy-on-write, prefix caching, invariants."""

import pytest

from playground.kvcache.engine.allocation import Copy
from playground.kvcache.engine.block_manager import BlockManager


def test_allocate_rounds_up_to_blocks_and_free_returns_everything():
    bm = BlockManager(num_blocks=10, block_size=16)
    bm.allocate(0, 33)
    assert bm.block_tables[0] == [0, 1, 2] and bm.num_free_blocks == 7
    assert bm.stats()["used_slots"] == 33 and bm.stats()["allocated_slots"] == 48
    bm.check_invariants()
    bm.free(0)
    bm.check_invariants()
    assert bm.num_free_blocks == 10 and bm.stats()["used_slots"] == 0


def test_refused_allocate_changes_nothing():
    bm = BlockManager(num_blocks=2, block_size=4)
    assert not bm.can_allocate(9)
    with pytest.raises(MemoryError):
        bm.allocate(0, 9)
    assert bm.num_free_blocks == 2 and not bm.block_tables


def test_slots_follow_the_block_table():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate(7, 2)
    bm.allocate(8, 2)
    bm.append(7, 4)  # 7 now spans blocks 0 and 2
    assert bm.block_tables[7] == [0, 2]
    assert list(bm.slots(7)) == [0, 1, 2, 3, 8, 9]
    assert bm.slot_list(7, 3, 6) == [3, 8, 9]


def test_fork_shares_and_cow_copies_only_the_partial_block():
    bm = BlockManager(num_blocks=20, block_size=16)
    bm.allocate(0, 100)  # 6 full + 1 partial (4 tokens)
    bm.fork(0, [1, 2])
    assert len(bm.block_tables[0]) == 7
    assert all(bm.blocks[b].ref_count == 3 for b in bm.block_tables[0])
    assert bm.stats()["shared_blocks"] == 7
    copies = bm.append(1, 10)
    partial = bm.block_tables[0][-1]
    assert copies == [Copy(partial * 16, bm.block_tables[1][-1] * 16, 4)]
    assert bm.block_tables[1][:6] == bm.block_tables[0][:6]  # full blocks stay shared
    assert bm.blocks[partial].ref_count == 2 and bm.num_cow_copies == 1
    bm.check_invariants()


def test_last_holder_writes_in_place_without_copy():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate(0, 2)
    bm.fork(0, [1])
    bm.free(0)
    assert bm.append(1, 1) == [] and bm.num_cow_copies == 0
    bm.check_invariants()


def test_full_shared_block_is_never_copied():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate(0, 4)
    bm.fork(0, [1])
    assert bm.append(1, 1) == [] and bm.num_cow_copies == 0
    assert bm.blocks[bm.block_tables[0][0]].ref_count == 2


def test_can_append_counts_the_cow_block():
    bm = BlockManager(num_blocks=2, block_size=4)
    bm.allocate(0, 2)
    bm.fork(0, [1])
    assert bm.can_append(1, 2)  # one block for the copy
    assert bm.can_append_batch({0: 1, 1: 1})  # one copies, the other then writes in place
    assert not bm.can_append(1, 3)  # copy + one more block: 2 > 1 free
    assert bm.append_batch({0: 1, 1: 1}) is not None and bm.num_free_blocks == 0
    bm.check_invariants()


@pytest.mark.parametrize(
    "prompt,branches,writes,unshared,shared", [(100, 4, 10, 28, 10), (1000, 8, 200, 600, 166)]
)
def test_lecture_page_counts(prompt, branches, writes, unshared, shared):
    """Section 4.5 (28 vs 10) and exercise 10 (600 vs 166) at block size 16."""
    bm = BlockManager(num_blocks=1000, block_size=16)
    for i in range(branches):
        bm.allocate(i, prompt)
        bm.append(i, writes)
    assert bm.stats()["used_blocks"] == unshared
    for i in range(branches):
        bm.free(i)
    bm.allocate(100, prompt)
    bm.fork(100, list(range(branches)))
    for i in range(branches):
        bm.append(i, writes)
    bm.free(100)
    assert bm.stats()["used_blocks"] == shared and bm.num_cow_copies == branches
    bm.check_invariants()


def test_prefix_caching_shares_full_blocks_of_a_common_prefix():
    bm = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    a = list(range(10))  # 2 full blocks + 2 tokens
    b = list(range(8)) + [99, 98, 97, 96, 95]
    assert bm.allocate(0, len(a), a) == 0
    assert bm.blocks_needed(len(b), b) == 2  # 4 blocks, 2 found in the cache
    assert bm.allocate(1, len(b), b) == 8
    assert bm.block_tables[1][:2] == bm.block_tables[0][:2]
    assert bm.block_tables[1][2] != bm.block_tables[0][2]
    c = [5] + list(range(1, 8))  # differs in the first block: no hit for the second either
    assert bm.allocate(2, len(c), c) == 0
    bm.check_invariants()
    for s in (0, 1, 2):
        bm.free(s)
    assert not bm.cached_blocks and bm.num_free_blocks == 20
    bm.check_invariants()


def test_double_ids_are_rejected():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate(0, 1)
    with pytest.raises(ValueError):
        bm.allocate(0, 1)
    with pytest.raises(ValueError):
        bm.fork(0, [0])
