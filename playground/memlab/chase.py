"""Pointer chasing (seed §1.4): the latency of one load at each working-set size.

The list is a random cyclic permutation of the working set's slots (one slot = one cache line,
64 bytes, as lmbench's lat_mem_rd default stride): each slot holds the address of the next, so
every load waits for the one before and prefetchers cannot guess the next address. Two orders:

- `random`: any slot may follow any other. Past the TLB's reach (with 4 KiB pages about
  2-3 thousand pages, 8-12 MiB) nearly every load also misses the TLB and pays a page walk:
  this is lat_mem_rd -t's pattern ("thrash"), and what a linked list in a big heap feels like.
- `page_grouped`: pages in random order, the lines inside a page in random order, every line of
  a page visited before the next page: one TLB miss per 64 loads, so the DRAM plateau is the
  memory's own latency (what lmbench2's line_initialize measured).

- `thrash`: lat_mem_rd -t's own order, rebuilt: round r visits every page once, in one random
  page order, at line bitreverse((k + r) mod lines_per_page) of the k-th page. The page sequence is
  a strict cycle, so once the set has more pages than a TLB level has entries, an LRU-like TLB
  misses on every load; `random` revisits pages in random order and still hits sometimes.

`huge_pages=True` asks for 2 MiB transparent huge pages (madvise), which also takes TLB misses
out of `random` up to ~6 GiB of reach; `huge_page_bytes` reports how much the kernel gave.
One buffer of the largest size is allocated once and reused, as lat_mem_rd does.
"""

import mmap
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from playground.core.errors import UsageError
from playground.core.native import load_native

HUGE_PAGE_BYTES = 2 * 1024 * 1024
LAYOUTS = ("random", "page_grouped", "thrash")


def cycle_order(num_slots: int, rng: np.random.Generator) -> np.ndarray:
    """A random visiting order of all slots; linked in a ring it is one cycle (Sattolo-equivalent)."""
    return rng.permutation(num_slots).astype(np.int64)


def page_grouped_order(num_slots: int, slots_per_page: int, rng: np.random.Generator) -> np.ndarray:
    """Random page order, random line order within each page; a partial last page comes last."""
    num_pages, rest = divmod(num_slots, slots_per_page)
    pages = rng.permutation(num_pages).astype(np.int64)
    within = np.argsort(rng.random((num_pages, slots_per_page)), axis=1).astype(np.int64)
    order = (pages[:, None] * slots_per_page + within).ravel()
    if rest:
        tail = num_pages * slots_per_page + rng.permutation(rest).astype(np.int64)
        order = np.concatenate([order, tail])
    return order


def bit_reversed(n: int) -> np.ndarray:
    """0..n-1 in bit-reversed order (n a power of two), lmbench's words_initialize."""
    bits = max(n.bit_length() - 1, 0)
    idx = np.arange(n)
    out = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        out |= ((idx >> b) & 1) << (bits - 1 - b)
    return out


def thrash_order(num_slots: int, slots_per_page: int, rng: np.random.Generator) -> np.ndarray:
    """lat_mem_rd -t's visiting order over whole pages (a partial last page is left out)."""
    num_pages = max(num_slots // slots_per_page, 1)
    per_page = min(slots_per_page, num_slots)
    pages = rng.permutation(num_pages).astype(np.int64)
    lines = bit_reversed(per_page)
    k = np.arange(num_pages)[None, :]
    r = np.arange(per_page)[:, None]
    return (pages[k] * slots_per_page + lines[(k + r) % per_page]).ravel()


def follow(order: np.ndarray) -> np.ndarray:
    """next_slot[s]: the slot that slot s points to once `order` is linked into a ring."""
    nxt = np.empty(order.size, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def is_single_cycle(order: np.ndarray) -> bool:
    """True if linking `order` into a ring visits every slot exactly once before returning."""
    if order.size == 0 or np.unique(order).size != order.size or order.min() < 0 or order.max() >= order.size:
        return False
    nxt = follow(order)
    slot, steps = int(order[0]), 0
    while True:
        slot, steps = int(nxt[slot]), steps + 1
        if slot == order[0]:
            return steps == order.size


class ChaseBuffer:
    """An anonymous mapping for the pointer lists, 2 MiB aligned, optionally huge-page backed."""

    def __init__(self, size_bytes: int, huge_pages: bool):
        self.size_bytes = size_bytes
        self._map = mmap.mmap(-1, size_bytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advice = mmap.MADV_HUGEPAGE if huge_pages else mmap.MADV_NOHUGEPAGE
        try:
            self._map.madvise(advice)
        except (OSError, AttributeError):  # not Linux, or THP compiled out: measure what we get
            pass
        raw = np.frombuffer(self._map, dtype=np.uint8)
        skew = (-raw.ctypes.data) % HUGE_PAGE_BYTES
        self.array: np.ndarray | None = raw[skew : skew + size_bytes]
        self.array[:: mmap.PAGESIZE] = 0  # fault every page in now, outside any timed region

    def huge_page_bytes(self) -> int:
        """AnonHugePages of this mapping in /proc/self/smaps (0 where unknown)."""
        start = self._map_address()
        try:
            text = Path("/proc/self/smaps").read_text()
        except OSError:
            return 0
        end = start + self.size_bytes + HUGE_PAGE_BYTES
        total = 0
        for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
            lo, _, hi = block.split(" ", 1)[0].partition("-")
            if int(lo, 16) < end and int(hi, 16) > start:
                m = re.search(r"^AnonHugePages:\s+(\d+) kB", block, re.M)
                total += int(m.group(1)) * 1024 if m else 0
        return total

    def _map_address(self) -> int:
        return np.frombuffer(self._map, dtype=np.uint8, count=1).ctypes.data

    def close(self) -> None:
        self.array = None
        try:
            self._map.close()
        except BufferError:  # a view still alive; the mapping goes with it
            pass


@dataclass(frozen=True)
class ChasePoint:
    working_set_bytes: int
    ns_per_load: float  # the chosen statistic (median or min) of the repeats
    ns_min: float
    ns_max: float
    num_loads: int
    overhead_ns: float  # empty-loop time per load, already subtracted


def measure_point(
    buf: ChaseBuffer,
    working_set_bytes: int,
    *,
    layout: str = "random",
    slot_bytes: int = 64,
    min_loads: int = 200_000,
    repeats: int = 5,
    statistic: str = "median",
    seed: int = 0,
) -> ChasePoint:
    """Link a list over the first `working_set_bytes` of `buf` and time walking it."""
    native = load_native()
    if layout not in LAYOUTS:
        raise UsageError(f"expected one of {', '.join(LAYOUTS)}, got {layout!r}", field="layout")
    num_slots = working_set_bytes // slot_bytes
    if num_slots < 2 or working_set_bytes > buf.size_bytes:
        raise UsageError(
            f"working set {working_set_bytes} B needs 2+ slots of {slot_bytes} B inside {buf.size_bytes} B"
        )
    rng = np.random.default_rng(seed + working_set_bytes)
    if layout == "random":
        order = cycle_order(num_slots, rng)
    elif layout == "thrash":
        order = thrash_order(num_slots, max(1, mmap.PAGESIZE // slot_bytes), rng)
    else:
        order = page_grouped_order(num_slots, max(1, mmap.PAGESIZE // slot_bytes), rng)
    start = native.link_chain(buf.array, order, slot_bytes)
    del order
    num_loads = max(min_loads, 100)
    warmup = (
        min(num_slots, 250_000) + 100
    )  # a whole cycle while it is short; past that no line is reused anyway
    times, end, overhead = native.chase(buf.array, start, num_loads, repeats, warmup)
    value = statistics.median(times) if statistic == "median" else min(times)
    return ChasePoint(
        working_set_bytes, value, min(times), max(times), (num_loads + 99) // 100 * 100, overhead
    )


def working_sets(
    min_bytes: int, max_bytes: int, points_per_octave: int, align_bytes: int = 4096
) -> list[int]:
    """Sizes from min to max, `points_per_octave` per doubling, rounded to `align_bytes`."""
    sizes: list[int] = []
    k = 0
    while True:
        size = int(round(min_bytes * 2 ** (k / points_per_octave) / align_bytes)) * align_bytes
        if size > max_bytes:
            break
        if not sizes or size > sizes[-1]:
            sizes.append(size)
        k += 1
    if sizes and sizes[-1] < max_bytes:
        sizes.append(max_bytes)
    return sizes
