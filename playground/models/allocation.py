"""Contiguous vs paged allocation (seed §4.3): external and internal fragmentation.

Contiguous (first fit): a block needs one run of free units. After many allocations and frees
the free space is cut into holes; a request fails when no single hole is big enough even if the
holes add up to more than enough. That is external fragmentation. Paged: a block takes
ceil(size / page) pages from anywhere, so a request fails only when too few pages are free; the
price is the unused tail of each block's last page, internal fragmentation (half a page a block
on average).

Both allocators are check-then-act (`can_allocate` before `allocate`, as nano-vllm's
BlockManager): a refused request changes nothing. `run_workload` drives both with the same
random stream of allocations and frees.
"""

import bisect
import copy
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from playground.core.errors import InvariantViolation, OutOfSpace, UsageError


@dataclass(frozen=True)
class Failure:
    step: int
    request: int
    free_units: int
    num_holes: int
    largest_hole: int

    @property
    def cause(self) -> str:
        return "external fragmentation" if self.free_units >= self.request else "out of space"


class ContiguousAllocator:
    """First fit: each block is one run [start, start + length) of adjacent units; the holes are
    the gaps between runs in address order, so a free merges with its neighbours by construction.

    The KV cache's contiguous policies (playground/kvcache/engine/contiguous.py) are this allocator with
    growth, moves and forks on top: `first_fit(size, ignore=...)` finds where a block could move
    counting its own run as free, `room_after` says how far it could grow in place, and
    `place`/`remove` move it.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.blocks: dict[int, tuple[int, int]] = {}  # block id -> (start, length)
        self._order: list[tuple[int, int]] = []  # (start, block id) of every run, sorted: address order
        self._used = 0

    def copy(self) -> "ContiguousAllocator":
        """An independent copy, to try operations on and throw away."""
        other = copy.copy(self)
        other.blocks, other._order = dict(self.blocks), list(self._order)
        return other

    # -- holes -----------------------------------------------------------------------------
    def _gaps(self, ignore: int | None = None) -> Iterator[tuple[int, int]]:
        """(start, length) of every hole in address order; `ignore`'s run counts as free."""
        pos = 0
        for start, block_id in self._order:
            if block_id == ignore:
                continue
            if start > pos:
                yield pos, start - pos
            pos = start + self.blocks[block_id][1]
        if pos < self.capacity:
            yield pos, self.capacity - pos

    @property
    def holes(self) -> list[tuple[int, int]]:
        return list(self._gaps())

    def largest_hole(self) -> int:
        return max((length for _, length in self._gaps()), default=0)

    def first_fit(self, size: int, ignore: int | None = None) -> int | None:
        """Start of the first hole of at least `size` units (`ignore`'s run counted free), or None."""
        return next((start for start, length in self._gaps(ignore) if length >= size), None)

    def room_after(self, block_id: int) -> int:
        """Units from the start of `block_id`'s run to the next run (or the end)."""
        start, _ = self.blocks[block_id]
        k = bisect.bisect_right(self._order, (start, block_id))
        return (self._order[k][0] if k < len(self._order) else self.capacity) - start

    def free_units(self) -> int:
        return self.capacity - self._used

    def used_units(self) -> int:
        return self._used

    # -- blocks ----------------------------------------------------------------------------
    def can_allocate(self, size: int) -> bool:
        return self.first_fit(size) is not None

    def allocate(self, block_id: int, size: int) -> int:
        """Start of the first hole that fits; OutOfSpace if none (call can_allocate first)."""
        start = self.first_fit(size)
        if start is None:
            raise OutOfSpace(
                f"no hole of {size} units (largest {self.largest_hole()})", need=size, unit="units"
            )
        self.place(block_id, start, size)
        return start

    def free(self, block_id: int) -> None:
        self.remove(block_id)

    def place(self, block_id: int, start: int, length: int) -> None:
        """Record `block_id` at [start, start + length); the caller has checked that it is free."""
        if block_id in self.blocks:
            raise UsageError(f"block {block_id} already placed at {self.blocks[block_id]}")
        self.blocks[block_id] = (start, length)
        bisect.insort(self._order, (start, block_id))
        self._used += length

    def remove(self, block_id: int) -> tuple[int, int]:
        """Forget `block_id`'s run; returns its (start, length)."""
        start, length = self.blocks.pop(block_id)
        del self._order[bisect.bisect_left(self._order, (start, block_id))]
        self._used -= length
        return start, length

    def check_invariants(self) -> None:
        end = 0
        for start, block_id in self._order:
            begin, length = self.blocks[block_id]
            if begin != start or begin < end or begin + length > self.capacity:
                raise InvariantViolation(
                    f"run of {block_id} [{begin}, {begin + length}) overlaps or overflows"
                )
            end = begin + length
        if len(self._order) != len(self.blocks):
            raise InvariantViolation("run index out of step with the runs")
        if self._used != sum(length for _, length in self.blocks.values()):
            raise InvariantViolation("used units out of step with the runs")


class PagedAllocator:
    """Fixed-size pages from a free list; a block's pages need not be adjacent."""

    def __init__(self, capacity: int, page_units: int):
        self.page_units = page_units
        self.num_pages = capacity // page_units
        self.free_pages = list(range(self.num_pages - 1, -1, -1))
        self.blocks: dict[int, tuple[list[int], int]] = {}  # block id -> (pages, size)

    def pages_for(self, size: int) -> int:
        return math.ceil(size / self.page_units)

    def can_allocate(self, size: int) -> bool:
        return self.pages_for(size) <= len(self.free_pages)

    def allocate(self, block_id: int, size: int) -> list[int]:
        need = self.pages_for(size)
        if need > len(self.free_pages):
            raise OutOfSpace(f"{need} pages needed, {len(self.free_pages)} free", need=need, unit="pages")
        pages = [self.free_pages.pop() for _ in range(need)]
        self.blocks[block_id] = (pages, size)
        return pages

    def free(self, block_id: int) -> None:
        pages, _ = self.blocks.pop(block_id)
        self.free_pages.extend(reversed(pages))

    def free_units(self) -> int:
        return len(self.free_pages) * self.page_units

    def used_units(self) -> int:
        return sum(size for _, size in self.blocks.values())

    def internal_waste_units(self) -> int:
        """Allocated but unused units: the tails of the blocks' last pages."""
        return sum(len(pages) * self.page_units - size for pages, size in self.blocks.values())


@dataclass
class PolicyStats:
    policy: str
    requests: int = 0
    failures: list[Failure] = field(default_factory=list)
    used_sum: float = 0.0  # sum over steps of units holding data
    waste_sum: float = 0.0  # sum over steps of internal waste
    samples: int = 0

    def row(self, capacity: int) -> dict:
        ext = sum(1 for f in self.failures if f.cause == "external fragmentation")
        used = self.used_sum / max(self.samples, 1)
        waste = self.waste_sum / max(self.samples, 1)
        return {
            "policy": self.policy,
            "requests": self.requests,
            "failures": len(self.failures),
            "external_frag_failures": ext,
            "out_of_space_failures": len(self.failures) - ext,
            "mean_used_pct": 100.0 * used / capacity,
            "internal_frag_pct": 100.0 * waste / (used + waste) if used + waste else 0.0,
        }


def make_workload(num_steps: int, min_size: int, max_size: int, seed: int) -> list[tuple[bool, int, float]]:
    """(is_alloc, size, pick) per step: half allocations, half frees of live block number
    floor(pick * live); the same list drives every policy."""
    rng = random.Random(seed)
    return [(rng.random() < 0.5, rng.randint(min_size, max_size), rng.random()) for _ in range(num_steps)]


def run_workload(
    allocator, policy: str, workload: list[tuple[bool, int, float]], capacity: int
) -> PolicyStats:
    """Replay `workload`; a free with nothing live becomes an allocation, as in the seed."""
    stats = PolicyStats(policy)
    live: list[int] = []
    for step, (is_alloc, size, pick) in enumerate(workload):
        if is_alloc or not live:
            stats.requests += 1
            if allocator.can_allocate(size):
                allocator.allocate(step, size)
                live.append(step)
            else:
                holes = getattr(allocator, "holes", None)
                stats.failures.append(
                    Failure(
                        step,
                        size,
                        allocator.free_units(),
                        len(holes) if holes is not None else 0,
                        allocator.largest_hole() if holes is not None else allocator.free_units(),
                    )
                )
        else:
            allocator.free(live.pop(int(pick * len(live))))
        stats.used_sum += allocator.used_units()
        stats.waste_sum += getattr(allocator, "internal_waste_units", lambda: 0)()
        stats.samples += 1
    return stats
