"""The cache staircase (seed §1.4): ns per load against working set, levels detected.

One rank walks a random cyclic pointer list (_playground_native.chase) over working sets from
`min_bytes` to `max_bytes`, detects the plateaus and prints them beside the caches the OS
reports. With `lmbench: true` it also runs lmbench's `lat_mem_rd -t` (if installed) and puts its
figure at the same working sets beside every plateau, saying which differ by more than 15%
(a measurement on a shared machine, so reported, not fatal). docs/memory-lab.md explains the
method and the differences.
"""

from dataclasses import dataclass
from typing import Literal

from playground.config.node import NodeContract, Ranks
from playground.core.errors import LabError, ParamError, ToolMissing
from playground.core.sizes import Size, format_size
from playground.display.report import Report
from playground.memlab import cache_report, chase, lmbench


@dataclass(frozen=True)
class Params:
    min_bytes: Size = 4 * 1024  # smallest working set (>= 4 KiB)
    max_bytes: Size = 256 * 1024 * 1024  # largest working set: allocated once, and the last point
    points_per_octave: int = 2  # working sets per doubling of the size (1-8), rounded to 4 KiB
    # the order the list visits its lines: random (any line next: TLB misses past its reach),
    # page_grouped (every line of a page before the next page: DRAM's own latency), thrash
    # (lat_mem_rd -t's order: each load on another page)
    layout: Literal["random", "page_grouped", "thrash"] = "random"
    huge_pages: bool = False  # madvise(MADV_HUGEPAGE): 2 MiB pages take TLB misses out of DRAM
    slot_bytes: int = 64  # distance between list elements: one cache line, lat_mem_rd's stride
    min_loads: int = 200_000  # timed loads per repeat
    repeats: int = 5  # timed walks of each working set
    statistic: Literal["min", "median"] = "min"  # which of the repeats' ns per load is shown
    rel_tol: float = 0.15  # a plateau: consecutive sizes all within this fraction of their median latency
    lmbench: bool = False  # also run lat_mem_rd -t up to lmbench_max_bytes and compare per plateau
    # lat_mem_rd's largest size; its run time grows fast with it: 16 MiB ~15 s, 64 MiB minutes
    lmbench_max_bytes: Size = 16 * 1024 * 1024
    seed: int = 0  # seed of the lists' random orders

    def __post_init__(self):
        if self.min_bytes < 4096:
            raise ParamError("min_bytes", f"must be >= 4 KiB, got {self.min_bytes}")
        if self.max_bytes < self.min_bytes:
            raise ParamError("max_bytes", f"must be >= min_bytes ({self.min_bytes}), got {self.max_bytes}")
        if self.max_bytes > 64 * 1024**3:
            raise ParamError("max_bytes", f"at most 64 GiB, got {self.max_bytes}")
        if not 1 <= self.points_per_octave <= 8:
            raise ParamError("points_per_octave", f"must be 1..8, got {self.points_per_octave}")
        if self.slot_bytes < 8 or self.slot_bytes % 8 or self.slot_bytes > 4096:
            raise ParamError("slot_bytes", f"a multiple of 8 from 8 to 4096, got {self.slot_bytes}")
        if self.min_loads < 1000 or self.repeats < 1:
            raise ParamError("min_loads", f"must be >= 1000 (and repeats >= 1), got {self.min_loads}")
        if not 0 < self.rel_tol < 1:
            raise ParamError("rel_tol", f"must be in (0, 1), got {self.rel_tol}")
        if self.lmbench_max_bytes < 1024 * 1024:
            raise ParamError("lmbench_max_bytes", f"must be >= 1 MiB, got {self.lmbench_max_bytes}")


def main(comm, params: Params) -> dict:
    sizes = chase.working_sets(params.min_bytes, params.max_bytes, params.points_per_octave)
    buf = chase.ChaseBuffer(sizes[-1], params.huge_pages)
    rows = []
    try:
        huge_bytes = buf.huge_page_bytes()
        for k, ws in enumerate(sizes):
            comm.progress(k, len(sizes), f"chase {format_size(ws)}")
            with comm.tracer.span("cache.chase", cat="compute", working_set_bytes=ws):
                p = chase.measure_point(
                    buf,
                    ws,
                    layout=params.layout,
                    slot_bytes=params.slot_bytes,
                    min_loads=params.min_loads,
                    repeats=params.repeats,
                    statistic=params.statistic,
                    seed=params.seed,
                )
            rows.append(
                {
                    "working_set_bytes": ws,
                    "working_set": format_size(ws),
                    "ns_per_load": p.ns_per_load,
                    "ns_min": p.ns_min,
                    "ns_max": p.ns_max,
                    "num_loads": p.num_loads,
                    "overhead_ns": p.overhead_ns,
                }
            )
        comm.progress(len(sizes), len(sizes), "chase done")
    finally:
        buf.close()
    out = {"ok": True, "rows": rows, "huge_page_bytes": huge_bytes}
    if params.lmbench:
        try:
            with comm.tracer.span("cache.lat_mem_rd", cat="compute"):
                lm_sizes, lm_ns = lmbench.run_lat_mem_rd(
                    max(1, params.lmbench_max_bytes // lmbench.MIB), params.slot_bytes
                )
            out["lmbench"] = {"sizes_bytes": lm_sizes, "ns_per_load": lm_ns}
        except (ToolMissing, LabError, OSError) as e:  # lmbench is optional: noted, not fatal
            out["lmbench_error"] = str(e)
    return out


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return cache_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "the cache lab measures one core"))
