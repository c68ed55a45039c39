"""Contiguous KV-cache allocation, the habit before vLLM: each sequence owns one run of
adjacent slots [start, start + reserved).

Two variants share this code:
- first-fit (`reserve_max=False`): a run is exactly the prompt; when a sequence outgrows it,
  it grows in place if the slots after it are free, else moves (its tokens copied) to the first
  hole that fits, else the append is refused. A move reserves `growth` times the length, as
  realloc-style vectors do, so a sequence is not moved on every token (that slack is internal
  fragmentation, the price of fewer moves).
- reserve-max (`reserve_max=True`): a run is prompt + max_new_tokens from the start and never
  grows; the unused tail is internal fragmentation. Appending past it is refused.

Free space is the holes between runs; a request can fail although the holes add up to enough
(external fragmentation = 1 - largest hole / free slots). Fork copies the parent's tokens:
there is no sharing without pages. Same check-then-act interface as BlockManager
(`allocation.AllocationPolicy`). Where runs
and holes are is the memory lab's first-fit allocator (models.allocation.ContiguousAllocator),
one block per sequence; this class adds lengths, growth, moves and forks.
"""

import copy

import numpy as np

from playground.core.errors import InvariantViolation, OutOfSpace, UsageError
from playground.kvcache.engine.allocation import Copy
from playground.models.allocation import ContiguousAllocator as FirstFit


class ContiguousAllocator:
    paged = False  # attention reads a sequence as one run from `table(seq_id)[0]`

    def __init__(
        self,
        capacity_slots: int,
        reserve_max: bool = False,
        max_new_tokens: int = 2048,
        growth: float = 1.5,
        block_size: int = 16,
    ):
        if capacity_slots < 1:
            raise UsageError(f"capacity_slots must be >= 1, got {capacity_slots}")
        self.name = "reserve_max" if reserve_max else "contiguous"
        self.capacity_slots = capacity_slots
        self.reserve_max = reserve_max
        self.default_max_new_tokens = max_new_tokens
        self.growth = growth
        self.block_size = block_size  # only to express sizes in blocks in reports
        self.space = FirstFit(capacity_slots)  # one run per sequence: seq_id -> (start, reserved)
        self.seq_lens: dict[int, int] = {}
        self.num_moves = 0
        self.moved_slots = 0

    @property
    def runs(self) -> dict[int, tuple[int, int]]:
        """seq_id -> (start, reserved) of its run."""
        return self.space.blocks

    # -- queries ---------------------------------------------------------------------------
    def has(self, seq_id: int) -> bool:
        return seq_id in self.runs

    def length(self, seq_id: int) -> int:
        return self.seq_lens[seq_id]

    def slots(self, seq_id: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        stop = self.seq_lens[seq_id] if stop is None else stop
        return self.runs[seq_id][0] + np.arange(start, stop, dtype=np.int64)

    def table(self, seq_id: int) -> list[int]:
        """One entry, the slot of the sequence's first token: its tokens are one run."""
        return [self.runs[seq_id][0]]

    def slot_list(self, seq_id: int, start: int, stop: int) -> list[int]:
        base = self.runs[seq_id][0]
        return list(range(base + start, base + stop))

    def _reservation(self, num_tokens: int, max_new_tokens: int | None) -> int:
        if not self.reserve_max:
            return num_tokens
        extra = self.default_max_new_tokens if max_new_tokens is None else max_new_tokens
        return num_tokens + extra

    def can_allocate(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> bool:
        return self.space.can_allocate(self._reservation(num_tokens, max_new_tokens))

    def fits_when_empty(self, num_tokens: int, max_new_tokens: int | None = None) -> bool:
        return self._reservation(num_tokens, max_new_tokens) <= self.capacity_slots

    def slots_needed(
        self, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        return self._reservation(num_tokens, max_new_tokens)

    def _plan_append(self, seq_id: int, num_tokens: int) -> tuple[str, int, int] | None:
        """('stay'|'grow'|'move', start, reserved) for the append, or None if refused."""
        start, reserved = self.runs[seq_id]
        need = self.seq_lens[seq_id] + num_tokens
        if need <= reserved:
            return "stay", start, reserved
        if self.reserve_max:
            return None
        roomy = max(need, int(self.seq_lens[seq_id] * self.growth))
        room = self.space.room_after(seq_id)
        if room >= need:
            return "grow", start, min(roomy, room)
        for size in (roomy, need):
            new_start = self.space.first_fit(size, ignore=seq_id)
            if new_start is not None:
                return "move", new_start, size
        return None

    def can_append(self, seq_id: int, num_tokens: int) -> bool:
        return self._plan_append(seq_id, num_tokens) is not None

    def can_append_batch(self, num_tokens_by_seq: dict[int, int]) -> bool:
        """Exact: the appends are tried in order on a scratch copy of the run table, because
        two sequences may each fit alone and still compete for the same hole."""
        if self.reserve_max:
            return all(self.can_append(s, n) for s, n in num_tokens_by_seq.items())
        trial = copy.copy(self)
        trial.space, trial.seq_lens = self.space.copy(), dict(self.seq_lens)
        for seq_id, num_tokens in num_tokens_by_seq.items():
            if not trial.can_append(seq_id, num_tokens):
                return False
            trial.append(seq_id, num_tokens)
        return True

    def append_batch(self, num_tokens_by_seq: dict[int, int]) -> list[Copy] | None:
        """All the appends, or none (None, nothing changed); copies are to be done in order."""
        saved = (self.space.copy(), dict(self.seq_lens), self.num_moves, self.moved_slots)
        copies: list[Copy] = []
        for seq_id, num_tokens in num_tokens_by_seq.items():
            plan = self._plan_append(seq_id, num_tokens)
            if plan is None:
                self.space, self.seq_lens, self.num_moves, self.moved_slots = saved
                return None
            copies += self._apply(seq_id, num_tokens, plan)
        return copies

    def within_reservation(self, seq_id: int, num_tokens: int) -> bool:
        """Reserve-max never grows a run: past its reservation an append will never fit."""
        return not self.reserve_max or self.seq_lens[seq_id] + num_tokens <= self.runs[seq_id][1]

    def can_fork(self, seq_id: int, num_children: int) -> bool:
        start, reserved = self.runs[seq_id]
        holes = sorted((size for _, size in self.space.holes), reverse=True)
        fit = 0
        for size in holes:
            fit += size // reserved if reserved else num_children
        return fit >= num_children

    # -- actions ---------------------------------------------------------------------------
    def allocate(
        self, seq_id: int, num_tokens: int, tokens: list[int] | None = None, max_new_tokens: int | None = None
    ) -> int:
        if seq_id in self.runs:
            raise UsageError(f"sequence {seq_id} already exists")
        reserved = self._reservation(num_tokens, max_new_tokens)
        start = self.space.first_fit(reserved)
        if start is None:
            raise OutOfSpace(f"no hole of {reserved} slots", need=reserved, unit="slots")
        self.space.place(seq_id, start, reserved)
        self.seq_lens[seq_id] = num_tokens
        return 0

    def append(self, seq_id: int, num_tokens: int) -> list[Copy]:
        plan = self._plan_append(seq_id, num_tokens)
        if plan is None:
            raise OutOfSpace(
                f"sequence {seq_id}: no room for {num_tokens} more tokens",
                need=num_tokens,
                unit="tokens",
                seq_id=seq_id,
            )
        return self._apply(seq_id, num_tokens, plan)

    def _apply(self, seq_id: int, num_tokens: int, plan: tuple[str, int, int]) -> list[Copy]:
        kind, start, reserved = plan
        if kind == "stay":
            self.seq_lens[seq_id] += num_tokens
            return []
        copies = []
        old_start, _ = self.space.remove(seq_id)
        self.space.place(seq_id, start, reserved)
        if kind == "move":
            copies.append(Copy(old_start, start, self.seq_lens[seq_id]))
            self.num_moves += 1
            self.moved_slots += self.seq_lens[seq_id]
        self.seq_lens[seq_id] += num_tokens
        return copies

    def fork(self, seq_id: int, child_ids: list[int]) -> list[Copy]:
        if not self.can_fork(seq_id, len(child_ids)):
            raise OutOfSpace(
                f"no room to copy sequence {seq_id} {len(child_ids)} times",
                need=len(child_ids),
                unit="copies",
                seq_id=seq_id,
            )
        start, reserved = self.runs[seq_id]
        copies = []
        for child in child_ids:
            if child in self.runs:
                raise UsageError(f"sequence {child} already exists")
            new_start = self.space.first_fit(reserved)
            if new_start is None:  # can_fork counted a hole for every child
                raise InvariantViolation(f"no hole of {reserved} slots for sequence {child} after can_fork")
            self.space.place(child, new_start, reserved)
            self.seq_lens[child] = self.seq_lens[seq_id]
            copies.append(Copy(start, new_start, self.seq_lens[seq_id]))
        return copies

    def free(self, seq_id: int) -> None:
        self.space.remove(seq_id)
        del self.seq_lens[seq_id]

    # -- accounting ------------------------------------------------------------------------
    def allocated_slots(self) -> int:
        return self.space.used_units()

    def usage(self) -> tuple[int, int, int]:
        """(slots holding tokens, slots allocated, largest free run); O(runs), for sampling."""
        return sum(self.seq_lens.values()), self.space.used_units(), self.space.largest_hole()

    def stats(self) -> dict:
        used, allocated, largest = self.usage()
        return {
            "capacity_slots": self.capacity_slots,
            "used_slots": used,
            "allocated_slots": allocated,
            "free_slots": self.capacity_slots - allocated,
            "largest_free_run_slots": largest,
            "used_blocks": None,
            "free_blocks": None,
            "shared_blocks": 0,
            "cow_copies": 0,
            "cache_hit_blocks": 0,
            "moved_slots": self.moved_slots,
        }

    def check_invariants(self) -> None:
        self.space.check_invariants()
        for seq, (_, reserved) in self.runs.items():
            if self.seq_lens[seq] > reserved:
                raise InvariantViolation(f"seq {seq}: {self.seq_lens[seq]} tokens in a run of {reserved}")
        if set(self.seq_lens) != set(self.runs):
            raise InvariantViolation("sequence lengths out of step with the runs")
        stats = self.stats()
        if stats["free_slots"] + stats["allocated_slots"] != self.capacity_slots:
            raise InvariantViolation("free + allocated != capacity")
