"""The cache lab's report: the pointer-chase curve -> plateaus detected and named beside the
caches the OS reports (and, when asked, lmbench's lat_mem_rd at the same working sets), the
staircase plot, and notes on the layout and pages the latencies include. A disagreement with
lat_mem_rd is reported, not fatal: both measure a shared machine."""

from pathlib import Path

from playground.core import machine
from playground.core.machine import CacheLevel
from playground.core.sizes import format_size
from playground.display.report import Report, Table
from playground.memlab import levels
from playground.memlab.levels import Level
from playground.memlab.plots import plot_staircase

PLOT = "cache.png"
TOLERANCE_PCT = 15  # how far from lat_mem_rd a plateau may be before the notes say so
CURVE_COLUMNS = {
    "working_set": "working set",
    "ns_per_load": "ns/load",
    "ns_min": "min",
    "ns_max": "max",
    "level": "level",
}
LEVEL_COLUMNS = {
    "level": "level",
    "latency_ns": "ns/load",
    "plateau": "plateau (working sets)",
    "next_point": "next point",
    "os_size": "OS says",
}
LMBENCH_COLUMNS = {
    "lat_mem_rd_plateau": "lat_mem_rd -t plateau",
    "lat_mem_rd_ns": "its ns/load",
    "diff_pct": "diff %",
}


def level_row(lv: Level, cache: CacheLevel | None, lm: dict | None, lm_levels: list[Level]) -> dict:
    """One detected level beside the OS's cache of that name and, with `lm`, lat_mem_rd's latency
    at the same working sets (or, if it has none there, at its level of the same name)."""
    row = {
        "level": lv.name,
        "latency_ns": lv.latency_ns,
        "plateau": f"{format_size(lv.first_bytes)} - {format_size(lv.last_bytes)}",
        "ends_after": format_size(lv.last_bytes),
        "next_point": format_size(lv.next_bytes) if lv.next_bytes else "-",
        "os_size": format_size(cache.size_bytes) if cache else "-",
    }
    if lm:
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
    return row


def outside_tolerance(level_rows: list[dict]) -> list[str]:
    """Levels whose latency differs from lat_mem_rd's by more than TOLERANCE_PCT, one line each."""
    return [
        f"{r['level']}: {r['latency_ns']:.1f} ns vs lat_mem_rd {r['lat_mem_rd_ns']:.1f} ns ({r['diff_pct']:+.0f}%)"
        for r in level_rows
        if r.get("lat_mem_rd_ns") and abs(r["diff_pct"]) > TOLERANCE_PCT
    ]


def notes(res: dict, params, caches: list[CacheLevel], outside: list[str] | None) -> list[str]:
    """`outside` is None when lat_mem_rd was not run."""
    os_caches = (
        ", ".join(f"{c.name} {format_size(c.size_bytes)} (shared by {c.shared_by_cpus} cpu)" for c in caches)
        or "not reported"
    )
    out = [
        f"CPU: {machine.cpu_model()}; OS caches (sysfs): {os_caches}; cache line "
        f"{machine.cache_line_bytes()} B; page {machine.page_bytes()} B; transparent huge pages: {machine.thp_mode()}",
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
    if outside is not None:
        out.append(
            "lat_mem_rd -t agrees within 15% at every plateau"
            if not outside
            else "outside 15% of lat_mem_rd -t: " + "; ".join(outside)
        )
    if "lmbench_error" in res:
        out.append(f"lat_mem_rd not compared: {res['lmbench_error']}")
    return out


def report(res: dict, params, run_dir: Path, caches: list[CacheLevel] | None = None) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params); `caches` are the
    OS's data caches (default: read from sysfs now)."""
    caches = machine.data_caches() if caches is None else caches
    rows, lm = res["rows"], res.get("lmbench")
    sizes = [r["working_set_bytes"] for r in rows]
    ns = [r["ns_per_load"] for r in rows]
    cache_pairs = [(c.name, c.size_bytes) for c in caches]
    suffix = " (2nd step)" if params.huge_pages else "+TLB"  # 2 MiB pages: the TLB covers every set here
    found = levels.detect_levels(sizes, ns, cache_pairs, params.rel_tol, repeat_suffix=suffix)
    lm_levels = (
        levels.detect_levels(
            lm["sizes_bytes"], lm["ns_per_load"], cache_pairs, params.rel_tol, repeat_suffix=suffix
        )
        if lm
        else []
    )
    for r in rows:
        r["level"] = next(
            (lv.name for lv in found if lv.first_bytes <= r["working_set_bytes"] <= lv.last_bytes), ""
        )
    by_name = {c.name: c for c in caches}
    level_rows = [
        level_row(lv, by_name.get(lv.name.split("+")[0].split(" ")[0]), lm, lm_levels) for lv in found
    ]
    outside = outside_tolerance(level_rows) if lm else None

    curves = {f"ours ({params.layout}, {'2 MiB' if params.huge_pages else '4 KiB'} pages)": (sizes, ns)}
    if lm:
        curves["lat_mem_rd -t"] = (lm["sizes_bytes"], lm["ns_per_load"])
    plot_staircase(
        curves,
        found,
        {c.name: c.size_bytes for c in caches},
        Path(run_dir) / PLOT,
        f"pointer chase, {params.slot_bytes} B slots, {params.statistic} of {params.repeats}",
    )
    return Report(
        ok=True,  # a broken measurement fails in the node; a disagreement with lat_mem_rd is a note
        tables=[
            Table("cache staircase", rows, CURVE_COLUMNS),
            Table(
                "levels detected", level_rows, {**LEVEL_COLUMNS, **LMBENCH_COLUMNS} if lm else LEVEL_COLUMNS
            ),
        ],
        notes=notes(res, params, caches, outside),
        data={"levels": level_rows, "lmbench": lm, "lmbench_within_15pct": (not outside) if lm else None},
        files=[PLOT],
    )
