"""The cache staircase (seed §1.4): ns per load against working set, levels detected.

One rank walks a random cyclic pointer list (playground._native.chase) over working sets from
`min_bytes` to `max_bytes`, detects the plateaus and prints them beside the caches the OS
reports. With `lmbench: true` it also runs lmbench's `lat_mem_rd -t` (if installed) and puts its
figure at the same working sets beside every plateau, saying which differ by more than 15%
(a measurement on a shared machine, so reported, not fatal). docs/memory-lab.md explains the
method and the differences.
"""

from dataclasses import dataclass
from typing import Literal

from playground.errors import ParamError
from playground.memlab import chase, levels, lmbench, sysinfo
from playground.memlab.plots import plot_staircase
from playground.report import Report, Table
from playground.sizes import Size, format_size


@dataclass(frozen=True)
class Params:
    min_bytes: Size = 4 * 1024
    max_bytes: Size = 256 * 1024 * 1024
    points_per_octave: int = 2
    layout: Literal["random", "page_grouped", "thrash"] = "random"
    huge_pages: bool = False  # madvise(MADV_HUGEPAGE): 2 MiB pages take TLB misses out of DRAM
    slot_bytes: int = 64  # distance between list elements: one cache line, lat_mem_rd's stride
    min_loads: int = 200_000  # timed loads per repeat
    repeats: int = 5
    statistic: Literal["min", "median"] = "min"
    rel_tol: float = 0.15  # how flat a plateau is
    lmbench: bool = False  # also run lat_mem_rd -t up to lmbench_max_bytes and compare per plateau
    lmbench_max_bytes: Size = (
        16 * 1024 * 1024
    )  # its run time grows fast with this: 16 MiB ~15 s, 64 MiB minutes
    seed: int = 0

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


def check_scenario(params: Params, ranks: int) -> None:
    if ranks != 1:
        raise ParamError("ranks", f"the cache lab measures one core, needs 1, got {ranks}")


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
        except (RuntimeError, OSError) as e:
            out["lmbench_error"] = str(e)
    return out


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    res = results[0]
    rows = res["rows"]
    sizes = [r["working_set_bytes"] for r in rows]
    ns = [r["ns_per_load"] for r in rows]
    caches = sysinfo.data_caches()
    suffix = " (2nd step)" if params.huge_pages else "+TLB"  # 2 MiB pages: the TLB covers every set here
    found = levels.detect_levels(
        sizes, ns, [(c.name, c.size_bytes) for c in caches], params.rel_tol, repeat_suffix=suffix
    )
    by_name = {c.name: c for c in caches}
    for r in rows:
        r["level"] = next(
            (lv.name for lv in found if lv.first_bytes <= r["working_set_bytes"] <= lv.last_bytes), ""
        )

    lm = res.get("lmbench")
    cache_pairs = [(c.name, c.size_bytes) for c in caches]
    lm_levels = (
        levels.detect_levels(
            lm["sizes_bytes"], lm["ns_per_load"], cache_pairs, params.rel_tol, repeat_suffix=suffix
        )
        if lm
        else []
    )
    failures = []  # a broken measurement; a disagreement with lat_mem_rd is reported, not fatal
    outside: list[str] = []
    level_rows = []
    for lv in found:
        cache = by_name.get(lv.name.split("+")[0].split(" ")[0])
        row = {
            "level": lv.name,
            "latency_ns": lv.latency_ns,
            "plateau": f"{format_size(lv.first_bytes)} - {format_size(lv.last_bytes)}",
            "ends_after": format_size(lv.last_bytes),
            "next_point": format_size(lv.next_bytes) if lv.next_bytes else "-",
            "os_size": format_size(cache.size_bytes) if cache else "-",
        }
        if lm:
            # lat_mem_rd at the same working sets; if it has none there, its level of the same name
            ref = levels.latency_at(lm["sizes_bytes"], lm["ns_per_load"], lv.first_bytes, lv.last_bytes)
            same_name = [r for r in lm_levels if r.name == lv.name]
            ref_level = levels.matching_level(lv, same_name) if ref is None else None
            if ref_level:
                ref = ref_level.latency_ns
            row["lat_mem_rd_plateau"] = (
                f"{format_size(ref_level.first_bytes)} - {format_size(ref_level.last_bytes)}"
                if ref_level
                else "same sizes"
                if ref
                else "-"
            )
            row["lat_mem_rd_ns"] = ref
            row["diff_pct"] = 100.0 * (lv.latency_ns - ref) / ref if ref else None
            if ref and abs(row["diff_pct"]) > 15:
                outside.append(
                    f"{lv.name}: {lv.latency_ns:.1f} ns vs lat_mem_rd {ref:.1f} ns ({row['diff_pct']:+.0f}%)"
                )
        level_rows.append(row)

    level_cols = {
        "level": "level",
        "latency_ns": "ns/load",
        "plateau": "plateau (working sets)",
        "next_point": "next point",
        "os_size": "OS says",
    }
    if lm:
        level_cols.update(
            {
                "lat_mem_rd_plateau": "lat_mem_rd -t plateau",
                "lat_mem_rd_ns": "its ns/load",
                "diff_pct": "diff %",
            }
        )
    curves = {f"ours ({params.layout}, {'2 MiB' if params.huge_pages else '4 KiB'} pages)": (sizes, ns)}
    if lm:
        curves["lat_mem_rd -t"] = (lm["sizes_bytes"], lm["ns_per_load"])
    plot_staircase(
        curves,
        found,
        {c.name: c.size_bytes for c in caches},
        run_dir / "cache.png",
        f"pointer chase, {params.slot_bytes} B slots, {params.statistic} of {params.repeats}",
    )

    os_caches = (
        ", ".join(f"{c.name} {format_size(c.size_bytes)} (shared by {c.shared_by_cpus} cpu)" for c in caches)
        or "not reported"
    )
    notes = [
        f"CPU: {sysinfo.cpu_model()}; OS caches (sysfs): {os_caches}; cache line "
        f"{sysinfo.cache_line_bytes()} B; page {sysinfo.page_bytes()} B; transparent huge pages: {sysinfo.thp_mode()}",
        f"layout {params.layout}: "
        + (
            "every load a random line of a random page (TLB misses past the TLB's reach are in the figure)"
            if params.layout == "random"
            else "random pages, all lines of a page in random order (1 TLB miss per page)"
            if params.layout == "page_grouped"
            else "lat_mem_rd -t's order: pages in a fixed cycle, one line each"
        ),
        f"huge pages asked: {params.huge_pages}; got {format_size(res.get('huge_page_bytes', 0))} of 2 MiB pages",
        "a level ends between its last working set and the next point; its capacity is the OS size",
    ]
    if lm:
        notes.append(
            "lat_mem_rd -t agrees within 15% at every plateau"
            if not outside
            else "outside 15% of lat_mem_rd -t: " + "; ".join(outside)
        )
    if "lmbench_error" in res:
        notes.append(f"lat_mem_rd not compared: {res['lmbench_error']}")
    return Report(
        ok=not failures,
        tables=[
            Table(
                "cache staircase",
                rows,
                {
                    "working_set": "working set",
                    "ns_per_load": "ns/load",
                    "ns_min": "min",
                    "ns_max": "max",
                    "level": "level",
                },
            ),
            Table("levels detected", level_rows, level_cols),
        ],
        notes=notes,
        failures=failures,
        data={"levels": level_rows, "lmbench": lm, "lmbench_within_15pct": (not outside) if lm else None},
        files=["cache.png"],
    )
