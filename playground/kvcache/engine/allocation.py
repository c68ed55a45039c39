"""The interface every KV-cache allocation policy speaks: one `typing.Protocol`, check-then-act.

A policy decides where each sequence's tokens live in a pool of `capacity_slots` token slots; it
moves no data. The engine (scheduler.py, llm_engine.py, model_runner.py, attention.py) and the
server (server/kv_ops.py, server/generate.py) call it only through `AllocationPolicy`, and both
allocators conform: `BlockManager` (paged, block_manager.py) and `ContiguousAllocator` (first fit
or reserve-max, contiguous.py): mypy checks it where policies.py registers them (the engine is in
pyproject's [tool.mypy] files), and tests/test_kvcache_allocation.py compares their methods and
signatures with this class.

Check-then-act: every `can_*` is pure, so a refused request changes nothing; the act after a true
check succeeds. An act that moves data (`append`, `append_batch`, `fork`) returns the `Copy`s the
owner of the pool does, in order, before it writes.
"""

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Copy:
    """Copy `num_slots` slots of the pool from `src_slot` to `dst_slot` (may overlap)."""

    src_slot: int
    dst_slot: int
    num_slots: int


class AllocationPolicy(Protocol):
    name: str  # the policy's name in policies.POLICIES
    paged: bool  # True: attention reads a sequence through its block table; False: as one run
    block_size: int  # tokens a block (a contiguous policy uses it only to report sizes in blocks)
    capacity_slots: int

    # -- queries ---------------------------------------------------------------------------
    def has(self, seq_id: int) -> bool: ...

    def length(self, seq_id: int) -> int:
        """Tokens the sequence holds."""
        ...

    def slots(self, seq_id: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Pool slot of each token position in [start, stop) of the sequence."""
        ...

    def slot_list(self, seq_id: int, start: int, stop: int) -> list[int]:
        """`slots` as a list; cheaper for the few positions of one append."""
        ...

    def table(self, seq_id: int) -> list[int]:
        """Where attention reads the sequence: its block table (paged), or one entry, the slot of
        its first token (contiguous)."""
        ...

    def can_allocate(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> bool:
        """Whether a new sequence of `num_tokens` fits now; `tokens` lets prefix caching find
        shared blocks, `max_new_tokens` is what reserve-max reserves beyond the prompt."""
        ...

    def slots_needed(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        """Free slots `allocate` would take (a scheduler's watermark compares it with what is free)."""
        ...

    def fits_when_empty(self, num_tokens: int, max_new_tokens: int | None = None) -> bool:
        """Whether such a sequence fits the empty pool (false: waiting will never help)."""
        ...

    def can_append(self, seq_id: int, num_tokens: int) -> bool: ...

    def can_append_batch(self, num_tokens_by_seq: dict[int, int]) -> bool:
        """Exact for the whole batch: every append of it fits at once."""
        ...

    def within_reservation(self, seq_id: int, num_tokens: int) -> bool:
        """False only if the policy reserved a maximum for the sequence at allocation and these
        tokens go past it (reserve-max): waiting will never make room for them."""
        ...

    def can_fork(self, seq_id: int, num_children: int) -> bool: ...

    # -- actions ---------------------------------------------------------------------------
    def allocate(
        self, seq_id: int, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        """Room for a new sequence of `num_tokens`; returns how many leading tokens were found in
        the prefix cache (their KV is in the pool already and must not be rewritten)."""
        ...

    def append(self, seq_id: int, num_tokens: int) -> list[Copy]: ...

    def append_batch(self, num_tokens_by_seq: dict[int, int]) -> list[Copy] | None:
        """All the appends, or none (None, nothing changed)."""
        ...

    def fork(self, seq_id: int, child_ids: list[int]) -> list[Copy]:
        """`child_ids` become copies of the sequence (shared blocks, or copied runs)."""
        ...

    def free(self, seq_id: int) -> None: ...

    # -- accounting ------------------------------------------------------------------------
    def allocated_slots(self) -> int: ...

    def usage(self) -> tuple[int, int, int]:
        """(slots holding tokens, slots allocated, largest free run), cheap enough to sample."""
        ...

    def stats(self) -> dict:
        """The counters the server's `stats` reply carries (the same keys for every policy)."""
        ...

    def check_invariants(self) -> None:
        """Raise InvariantViolation naming the first broken invariant."""
        ...
