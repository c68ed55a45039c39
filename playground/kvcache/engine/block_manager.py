"""Paged KV-cache allocation, as in vLLM: fixed-size blocks, per-sequence block tables,
reference counts, fork by sharing, copy-on-write, optional automatic prefix caching.

Words (vLLM's): a *block* holds `block_size` token slots; a sequence's *block table* lists
its blocks in order, so token position p lives in slot
`block_table[p // block_size] * block_size + p % block_size` of the pool. A block's
*ref_count* is the number of block-table entries pointing at it.

Rules that keep every read exact:
- fork gives each child a copy of the parent's block table; every block's ref_count grows.
- only the last block of a sequence is ever written (tokens are appended). If it is shared
  and partly filled, the writer first gets a private copy (copy-on-write); full shared blocks
  are never written, so they stay shared.
- a block returns to the free list when its ref_count drops to 0.
- prefix caching shares only *full* prompt blocks, found by (previous block id, its tokens),
  so a hit means the same tokens after the same prefix; the cache forgets a block when it is freed.

The manager moves no data: `append` returns the `Copy`s the owner of the KV pool must do
before writing. Check-then-act: every `can_*` is pure, so a refused request changes nothing. It
conforms to `allocation.AllocationPolicy`, as contiguous.py does.
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from playground.core.errors import InvariantViolation, OutOfSpace, UsageError
from playground.kvcache.engine.allocation import Copy


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    num_tokens: int = 0  # slots holding real tokens (the same for every sharer)
    cache_key: tuple | None = None

    def __repr__(self):
        return f"Block({self.block_id}, ref={self.ref_count}, tokens={self.num_tokens})"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockManager:
    """Owns `num_blocks` blocks of `block_size` slots; knows nothing about what they hold."""

    name = "paged"
    paged = True  # attention reads a sequence through its block table (attention.run_table)

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False):
        if num_blocks < 1 or block_size < 1:
            raise UsageError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.capacity_slots = num_blocks * block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self.seq_lens: dict[int, int] = {}
        self.cached_blocks: dict[tuple, int] = {}
        self.num_cow_copies = 0
        self.num_cache_hit_blocks = 0
        self.num_used_slots = 0  # slots holding real tokens, kept as we go so sampling is O(1)
        self.num_shared_blocks = 0

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def has(self, seq_id: int) -> bool:
        return seq_id in self.block_tables

    def length(self, seq_id: int) -> int:
        return self.seq_lens[seq_id]

    def slots(self, seq_id: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Pool slot of each token position in [start, stop) of `seq_id`."""
        stop = self.seq_lens[seq_id] if stop is None else stop
        pos = np.arange(start, stop, dtype=np.int64)
        table = np.asarray(self.block_tables[seq_id], dtype=np.int64)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def table(self, seq_id: int) -> list[int]:
        """The sequence's block table (attention reads its tokens block by block through it)."""
        return self.block_tables[seq_id]

    def slot_list(self, seq_id: int, start: int, stop: int) -> list[int]:
        """`slots` as a list; cheaper for the few positions of one append."""
        table, bs = self.block_tables[seq_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]

    def _cache_keys(self, tokens: list[int] | None) -> list[tuple]:
        """Keys of the prompt's full blocks that are already cached, in order (a prefix)."""
        keys: list[tuple] = []
        prev: int | None = None
        if not self.enable_prefix_caching or tokens is None:
            return keys
        for i in range(len(tokens) // self.block_size):
            key = (prev, tuple(tokens[i * self.block_size : (i + 1) * self.block_size]))
            block_id = self.cached_blocks.get(key)
            if block_id is None:
                break
            keys.append(key)
            prev = block_id
        return keys

    def blocks_needed(self, num_tokens: int, tokens: list[int] | None = None) -> int:
        return cdiv(num_tokens, self.block_size) - len(self._cache_keys(tokens))

    def can_allocate(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> bool:
        return self.blocks_needed(num_tokens, tokens) <= self.num_free_blocks

    def slots_needed(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        """Free slots `allocate` would take (a scheduler's watermark compares it with what is free)."""
        return self.blocks_needed(num_tokens, tokens) * self.block_size

    def fits_when_empty(self, num_tokens: int, max_new_tokens: int | None = None) -> bool:
        return cdiv(num_tokens, self.block_size) <= self.num_blocks

    def _append_blocks_needed(self, seq_id: int, num_tokens: int) -> int:
        """New blocks for the tokens alone, not counting a copy-on-write of the last block."""
        if num_tokens <= 0:
            return 0
        length = self.seq_lens[seq_id]
        return cdiv(length + num_tokens, self.block_size) - cdiv(length, self.block_size)

    def can_append(self, seq_id: int, num_tokens: int) -> bool:
        return self.can_append_batch({seq_id: num_tokens})

    def can_append_batch(self, num_tokens_by_seq: dict[int, int]) -> bool:
        """Exact: a shared partly filled block written by k sequences of the batch is copied
        min(k, ref_count - 1) times (the last holder to write keeps the original)."""
        need = 0
        writers: dict[int, int] = {}  # a shared last block -> how many of the batch write into it
        for seq_id, n in num_tokens_by_seq.items():
            need += self._append_blocks_needed(seq_id, n)
            if n > 0 and self.seq_lens[seq_id] % self.block_size:
                last = self.block_tables[seq_id][-1]
                writers[last] = writers.get(last, 0) + 1
        need += sum(min(k, self.blocks[b].ref_count - 1) for b, k in writers.items())
        return need <= self.num_free_blocks

    def within_reservation(self, seq_id: int, num_tokens: int) -> bool:
        return True  # nothing is reserved ahead: blocks come as the tokens do

    def can_fork(self, seq_id: int, num_children: int) -> bool:
        return True  # children share every block; nothing is allocated until they write

    # -- actions ---------------------------------------------------------------------------
    def _take_free_block(self) -> Block:
        block = self.blocks[self.free_block_ids.popleft()]
        assert block.ref_count == 0, block
        block.ref_count = 1
        block.num_tokens = 0
        return block

    def _share(self, block: Block) -> None:
        block.ref_count += 1
        if block.ref_count == 2:
            self.num_shared_blocks += 1

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 1:
            self.num_shared_blocks -= 1
        if block.ref_count == 0:
            self.num_used_slots -= block.num_tokens
            if block.cache_key is not None:
                del self.cached_blocks[block.cache_key]
                block.cache_key = None
            block.num_tokens = 0
            self.free_block_ids.append(block_id)

    def allocate(
        self, seq_id: int, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        """Give `seq_id` the blocks for a prompt of `num_tokens`; returns how many leading tokens
        were found in the prefix cache (their KV is already in the pool and must not be rewritten)."""
        if seq_id in self.block_tables:
            raise UsageError(f"sequence {seq_id} already exists")
        if not self.can_allocate(num_tokens, tokens):
            need = self.blocks_needed(num_tokens, tokens)
            raise OutOfSpace(f"need {need} blocks, {self.num_free_blocks} free", need=need, unit="blocks")
        table: list[int] = []
        hits = self._cache_keys(tokens)
        for key in hits:
            block_id = self.cached_blocks[key]
            self._share(self.blocks[block_id])
            table.append(block_id)
        self.num_cache_hit_blocks += len(hits)
        for i in range(len(hits), cdiv(num_tokens, self.block_size)):
            block = self._take_free_block()
            block.num_tokens = min(self.block_size, num_tokens - i * self.block_size)
            if self.enable_prefix_caching and tokens is not None and block.num_tokens == self.block_size:
                prev = table[-1] if table else None
                key = (prev, tuple(tokens[i * self.block_size : (i + 1) * self.block_size]))
                if key not in self.cached_blocks:
                    self.cached_blocks[key] = block.block_id
                    block.cache_key = key
            table.append(block.block_id)
            self.num_used_slots += block.num_tokens
        self.block_tables[seq_id] = table
        self.seq_lens[seq_id] = num_tokens
        return len(hits) * self.block_size

    def append(self, seq_id: int, num_tokens: int) -> list[Copy]:
        """Make room for `num_tokens` more tokens; returns the copies to do before writing them.
        The caller has checked `can_append(_batch)`."""
        copies: list[Copy] = []
        if num_tokens <= 0:
            return copies
        table, length, bs = self.block_tables[seq_id], self.seq_lens[seq_id], self.block_size
        if length % bs:
            last = self.blocks[table[-1]]
            if last.ref_count > 1:  # copy-on-write of the shared, partly filled last block
                fresh = self._take_free_block()
                fresh.num_tokens = last.num_tokens
                copies.append(Copy(last.block_id * bs, fresh.block_id * bs, last.num_tokens))
                self._release(last.block_id)
                self.num_used_slots += fresh.num_tokens
                table[-1] = fresh.block_id
                self.num_cow_copies += 1
        new_length = length + num_tokens
        while len(table) < cdiv(new_length, bs):
            table.append(self._take_free_block().block_id)
        for i in range(length // bs, len(table)):
            self.blocks[table[i]].num_tokens = min(bs, new_length - i * bs)
        self.num_used_slots += num_tokens
        self.seq_lens[seq_id] = new_length
        return copies

    def append_batch(self, num_tokens_by_seq: dict[int, int]) -> list[Copy] | None:
        """All the appends, or none (None, nothing changed); copies are to be done in order."""
        if not self.can_append_batch(num_tokens_by_seq):
            return None
        return [c for seq_id, n in num_tokens_by_seq.items() for c in self.append(seq_id, n)]

    def fork(self, seq_id: int, child_ids: list[int]) -> list[Copy]:
        table = self.block_tables[seq_id]
        for child in child_ids:
            if child in self.block_tables:
                raise UsageError(f"sequence {child} already exists")
            for block_id in table:
                self._share(self.blocks[block_id])
            self.block_tables[child] = list(table)
            self.seq_lens[child] = self.seq_lens[seq_id]
        return []

    def free(self, seq_id: int) -> None:
        for block_id in reversed(self.block_tables.pop(seq_id)):
            self._release(block_id)
        del self.seq_lens[seq_id]

    # -- accounting ------------------------------------------------------------------------
    def allocated_slots(self) -> int:
        return (self.num_blocks - self.num_free_blocks) * self.block_size

    def usage(self) -> tuple[int, int, int]:
        """(slots holding tokens, slots allocated, largest free run) in O(1), for sampling."""
        free_slots = self.num_free_blocks * self.block_size
        return self.num_used_slots, self.capacity_slots - free_slots, free_slots  # any free block fits

    def stats(self) -> dict:
        used_slots, allocated_slots, free_slots = self.usage()
        return {
            "capacity_slots": self.capacity_slots,
            "used_slots": used_slots,
            "allocated_slots": allocated_slots,
            "free_slots": free_slots,
            "largest_free_run_slots": free_slots,
            "used_blocks": self.num_blocks - self.num_free_blocks,
            "free_blocks": self.num_free_blocks,
            "shared_blocks": self.num_shared_blocks,
            "cow_copies": self.num_cow_copies,
            "cache_hit_blocks": self.num_cache_hit_blocks,
            "moved_slots": 0,
        }

    def check_invariants(self) -> None:
        """Raise InvariantViolation naming the first broken invariant (tests call this after every op)."""
        refs = [0] * self.num_blocks
        for seq_id, table in self.block_tables.items():
            expect = cdiv(self.seq_lens[seq_id], self.block_size)
            if len(table) != expect:
                raise InvariantViolation(
                    f"seq {seq_id}: {len(table)} blocks for {self.seq_lens[seq_id]} tokens"
                )
            for block_id in table:
                refs[block_id] += 1
        for block in self.blocks:
            if block.ref_count != refs[block.block_id]:
                raise InvariantViolation(f"{block!r}: {refs[block.block_id]} block-table entries point at it")
        free = set(self.free_block_ids)
        if len(free) != len(self.free_block_ids):
            raise InvariantViolation("a block is on the free list twice")
        used = sum(1 for b in self.blocks if b.ref_count > 0)
        if used + len(free) != self.num_blocks or any(self.blocks[i].ref_count for i in free):
            raise InvariantViolation(f"free {len(free)} + used {used} != capacity {self.num_blocks}")
        used_blocks = [b for b in self.blocks if b.ref_count > 0]
        if self.num_used_slots != sum(b.num_tokens for b in used_blocks):
            raise InvariantViolation(f"used-slot counter {self.num_used_slots} is off")
        if self.num_shared_blocks != sum(1 for b in used_blocks if b.ref_count > 1):
            raise InvariantViolation(f"shared-block counter {self.num_shared_blocks} is off")
        for key, block_id in self.cached_blocks.items():
            if self.blocks[block_id].cache_key != key or self.blocks[block_id].ref_count == 0:
                raise InvariantViolation(f"prefix cache entry points at {self.blocks[block_id]!r}")
