"""Finds the plateaus ("levels") of a latency-vs-working-set curve: the cache staircase.

A plateau is a run of consecutive working sets whose latencies all lie within `rel_tol` of the
run's median; anything between two plateaus is a transition (part of the set still hits the
smaller level). Each level reports its latency (the median of its points) and the largest
working set on it, which is where that level of the hierarchy ends: its capacity lies between
that size and the next point measured. The lmbench manual says to read these off a log-scale
plot by eye; this does the same, with the tolerance written down.

Plateaus are named in order after the data caches the OS reports (L1d, L2, L3) and the first
one past them "DRAM"; a further step ("DRAM+TLB") is the page walk once the set outgrows the
TLB's reach. The names are a reading aid; the sizes beside them are the evidence.
"""

import statistics
from dataclasses import dataclass


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
        raise ValueError(f"sizes and latencies differ in length: {len(sizes_bytes)} vs {len(ns_per_load)}")
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
    cache_names: list[str] = ("L1", "L2", "L3"),
    rel_tol: float = 0.15,
    min_points: int = 2,
) -> list[Level]:
    """The plateaus of the curve as named levels (see the module docstring)."""
    names = list(cache_names) + ["DRAM"]
    levels = []
    for k, (i, j) in enumerate(find_plateaus(sizes_bytes, ns_per_load, rel_tol, min_points)):
        name = names[k] if k < len(names) else "DRAM+TLB" if k == len(names) else f"level {k + 1}"
        levels.append(
            Level(
                name=name,
                latency_ns=statistics.median(ns_per_load[i : j + 1]),
                first_bytes=sizes_bytes[i],
                last_bytes=sizes_bytes[j],
                next_bytes=sizes_bytes[j + 1] if j + 1 < len(sizes_bytes) else None,
                num_points=j - i + 1,
            )
        )
    return levels


def latency_at(sizes_bytes: list[int], ns_per_load: list[float], first_bytes: int, last_bytes: int) -> float | None:
    """Median latency of another curve (e.g. lat_mem_rd's) over [first_bytes, last_bytes]."""
    inside = [ns for s, ns in zip(sizes_bytes, ns_per_load, strict=True) if first_bytes <= s <= last_bytes]
    return statistics.median(inside) if inside else None
