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
import math
import random
from dataclasses import dataclass, field


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
    """First fit over a sorted list of free holes [(start, length)], merged on free."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.holes: list[tuple[int, int]] = [(0, capacity)] if capacity > 0 else []
        self.blocks: dict[int, tuple[int, int]] = {}  # block id -> (start, length)

    def free_units(self) -> int:
        return sum(length for _, length in self.holes)

    def largest_hole(self) -> int:
        return max((length for _, length in self.holes), default=0)

    def can_allocate(self, size: int) -> bool:
        return any(length >= size for _, length in self.holes)

    def allocate(self, block_id: int, size: int) -> int:
        """Start of the first hole that fits; ValueError if none (call can_allocate first)."""
        for k, (start, length) in enumerate(self.holes):
            if length >= size:
                if length == size:
                    del self.holes[k]
                else:
                    self.holes[k] = (start + size, length - size)
                self.blocks[block_id] = (start, size)
                return start
        raise ValueError(f"no hole of {size} units (largest {self.largest_hole()})")

    def free(self, block_id: int) -> None:
        start, length = self.blocks.pop(block_id)
        k = bisect.bisect_left(self.holes, (start, 0))
        self.holes.insert(k, (start, length))
        if k + 1 < len(self.holes) and start + length == self.holes[k + 1][0]:  # merge right
            self.holes[k] = (start, length + self.holes.pop(k + 1)[1])
        if k > 0 and self.holes[k - 1][0] + self.holes[k - 1][1] == start:  # merge left
            prev_start, prev_len = self.holes.pop(k - 1)
            self.holes[k - 1] = (prev_start, prev_len + self.holes[k - 1][1])

    def used_units(self) -> int:
        return sum(length for _, length in self.blocks.values())


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
            raise ValueError(f"{need} pages needed, {len(self.free_pages)} free")
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
