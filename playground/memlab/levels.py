"""Finds the plateaus ("levels") of a latency-vs-working-set curve: the cache staircase.

A plateau is a run of consecutive working sets whose latencies all lie within `rel_tol` of the
run's median; anything between two plateaus is a transition (part of the set still hits the
smaller level). Each level reports its latency (the median of its points) and the largest
working set on it, which is where that level of the hierarchy ends: its capacity lies between
that size and the next point measured. The lmbench manual says to read these off a log-scale
plot by eye; this does the same, with the tolerance written down.

Each plateau is named after the smallest cache the OS reports that holds its largest working set
(L1d, L2, L3), or "DRAM" past them all or once a load takes `dram_min_ns` (60 ns: no cache is
that slow, and on a cloud VM the L3 the OS reports is shared with other tenants' cores, so the
set spills to DRAM long before the reported size). A second plateau inside the same cache gets "+TLB": with
4 KiB pages the set has outgrown a TLB level's reach, so every load also pays a TLB miss (on
this machine 256 KiB = 64 L1 TLB entries; 12 MiB = 3072 L2 TLB entries). The names are a
reading aid; the sizes beside them are the evidence. With huge pages there is no TLB step to name,
so callers pass another `repeat_suffix`.
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError


@dataclass(frozen=True)
class Level:
    name: str
    latency_ns: float
    first_bytes: int  # smallest working set on the plateau
    last_bytes: int  # largest working set on the plateau: where the level ends
    next_bytes: int | None  # the first measured size past it (None for the last plateau)
    num_points: int


def find_plateaus(
    sizes_bytes: list[int], ns_per_load: list[float], rel_tol: float = 0.15, min_points: int = 2
) -> list[tuple[int, int]]:
    """Index ranges [i, j] (inclusive) of the plateaus, in order of working-set size."""
    if len(sizes_bytes) != len(ns_per_load):
        raise UsageError(f"sizes and latencies differ in length: {len(sizes_bytes)} vs {len(ns_per_load)}")
    values = list(ns_per_load)
    n = len(values)

    def reach(i: int) -> int:  # the last index j such that values[i..j] is one plateau
        j = i
        while j + 1 < n and _fits(values[i : j + 2], rel_tol):
            j += 1
        return j

    runs: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = reach(i)
        while i < j and reach(i + 1) > j:  # i is the tail of a transition: start later
            i += 1
            j = reach(i)
        if j - i + 1 >= min_points:
            runs.append((i, j))
            i = j + 1
        else:
            i += 1
    return runs


def _fits(values: list[float], rel_tol: float) -> bool:
    mid = statistics.median(values)
    return all(abs(v - mid) <= rel_tol * mid for v in values)


def detect_levels(
    sizes_bytes: list[int],
    ns_per_load: list[float],
    caches: Sequence[tuple[str, int]] = (),
    rel_tol: float = 0.15,
    min_points: int = 2,
    dram_min_ns: float = 60.0,
    repeat_suffix: str = "+TLB",
) -> list[Level]:
    """The plateaus of the curve as named levels; `caches` is [(name, size_bytes)] smallest first."""
    levels: list[Level] = []
    for i, j in find_plateaus(sizes_bytes, ns_per_load, rel_tol, min_points):
        latency = statistics.median(ns_per_load[i : j + 1])
        name = (
            "DRAM"
            if latency >= dram_min_ns
            else next((n for n, size in caches if sizes_bytes[j] <= size), "DRAM")
        )
        if any(lv.name == name or lv.name.startswith(name + repeat_suffix) for lv in levels):
            name += repeat_suffix
        levels.append(
            Level(
                name=name,
                latency_ns=latency,
                first_bytes=sizes_bytes[i],
                last_bytes=sizes_bytes[j],
                next_bytes=sizes_bytes[j + 1] if j + 1 < len(sizes_bytes) else None,
                num_points=j - i + 1,
            )
        )
    return levels


def matching_level(level: Level, others: list[Level]) -> Level | None:
    """The level of another curve whose working-set range overlaps `level`'s most (in log size),
    so a plateau is compared with the same plateau even if the two curves sample other sizes."""

    def overlap(a: Level, b: Level) -> float:
        lo, hi = max(a.first_bytes, b.first_bytes), min(a.last_bytes, b.last_bytes)
        return math.log2(hi / lo) if hi >= lo else -math.log2(lo / hi)

    best = max(others, key=lambda o: overlap(level, o), default=None)
    return best if best is not None and overlap(level, best) >= -1.0 else None


def latency_at(
    sizes_bytes: list[int], ns_per_load: list[float], first_bytes: int, last_bytes: int
) -> float | None:
    """Median latency of another curve (e.g. lat_mem_rd's) over [first_bytes, last_bytes]."""
    inside = [ns for s, ns in zip(sizes_bytes, ns_per_load, strict=True) if first_bytes <= s <= last_bytes]
    return statistics.median(inside) if inside else None
