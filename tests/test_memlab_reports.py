"""The memory labs' reports and checks on synthetic results (no processes, no native code): the
model labs' own `main` needs no communicator, the measured ones get hand-made rows."""

import pytest

from nodes import cache, fragmentation, gather, pagesize, paging, stride, translation
from playground.core.machine import CacheLevel
from playground.memlab import (
    cache_report,
    fragmentation_report,
    gather_report,
    pagesize_report,
    paging_report,
    stride_report,
    translation_report,
)
from playground.memlab.strides import lines_touched

KIB, MIB = 1024, 1024 * 1024


def test_lines_touched():
    n = MIB // 4  # 1 MiB of float32, 64-byte lines: 16384 lines
    assert [lines_touched(n, s, 64) for s in (1, 16, 17, 64)] == [16384, 16384, 15421, 4096]
    assert lines_touched(10, 100, 64) == 1 and lines_touched(1, 1, 64) == 1


# -- cache ------------------------------------------------------------------------------------------
CACHES = [CacheLevel(1, "Data", 32 * KIB, 64, 1), CacheLevel(2, "Unified", 256 * KIB, 64, 1)]
SIZES = [4 * KIB * 2**k for k in range(9)]  # 4 KiB .. 1 MiB
NS = [1.0, 1.0, 1.05, 1.0, 4.0, 4.1, 4.0, 12.0, 12.5]  # L1 up to 32 KiB, L2 up to 256 KiB, then L3


def cache_result(lm_scale=None, lm_error=None):
    rows = [
        {
            "working_set_bytes": s,
            "working_set": f"{s // KIB} KiB",
            "ns_per_load": ns,
            "ns_min": ns,
            "ns_max": ns,
        }
        for s, ns in zip(SIZES, NS, strict=True)
    ]
    res = {"ok": True, "rows": rows, "huge_page_bytes": 0}
    if lm_scale:
        res["lmbench"] = {"sizes_bytes": SIZES, "ns_per_load": [ns * lm_scale for ns in NS]}
    if lm_error:
        res["lmbench_error"] = lm_error
    return res


def test_cache_report_names_the_plateaus_after_the_os_caches(tmp_path):
    rep = cache_report.report(cache_result(), cache.Params(), tmp_path, caches=CACHES)
    assert rep.ok and rep.files == ["cache.png"] and (tmp_path / "cache.png").stat().st_size > 0
    curve, found = rep.tables
    assert [r["level"] for r in curve.rows] == ["L1d"] * 4 + ["L2"] * 3 + ["DRAM"] * 2
    assert [(r["level"], r["plateau"], r["next_point"], r["os_size"]) for r in found.rows] == [
        ("L1d", "4 KiB - 32 KiB", "64 KiB", "32 KiB"),
        ("L2", "64 KiB - 256 KiB", "512 KiB", "256 KiB"),
        ("DRAM", "512 KiB - 1 MiB", "-", "-"),
    ]
    assert found.columns == cache_report.LEVEL_COLUMNS
    assert rep.data == {"levels": found.rows, "lmbench": None, "lmbench_within_15pct": None}
    assert "OS caches (sysfs): L1d 32 KiB (shared by 1 cpu), L2 256 KiB (shared by 1 cpu)" in rep.notes[0]
    assert rep.notes[1].startswith("layout random: every load a random line of a random page")
    assert len(rep.notes) == 4


def test_cache_report_beside_lat_mem_rd(tmp_path):
    near = cache_report.report(cache_result(lm_scale=1.1), cache.Params(), tmp_path, caches=CACHES)
    assert near.tables[1].columns == {**cache_report.LEVEL_COLUMNS, **cache_report.LMBENCH_COLUMNS}
    assert len(near.tables[1].rows) == 3  # L1, L2 and memory
    assert all(r["lat_mem_rd_plateau"] == "same sizes" for r in near.tables[1].rows)
    assert near.tables[1].rows[0]["diff_pct"] == pytest.approx(100 * (1 - 1.1) / 1.1)
    assert near.notes[-1] == "lat_mem_rd -t agrees within 15% at every plateau"
    assert near.data["lmbench_within_15pct"] is True
    far = cache_report.report(cache_result(lm_scale=1.5), cache.Params(), tmp_path, caches=CACHES)
    assert far.ok  # a disagreement is reported, not fatal
    assert far.notes[-1].startswith(
        "outside 15% of lat_mem_rd -t: L1d: 1.0 ns vs lat_mem_rd 1.5 ns (-33%); L2:"
    )
    assert far.data["lmbench_within_15pct"] is False
    err = cache_report.report(
        cache_result(lm_error="lat_mem_rd: not installed"), cache.Params(), tmp_path, caches=[]
    )
    assert err.notes[-1] == "lat_mem_rd not compared: lat_mem_rd: not installed"
    assert "OS caches (sysfs): not reported" in err.notes[0]


# -- stride, gather ---------------------------------------------------------------------------------
def stride_rows(ok=True):
    rows = []
    for s, lines in ((1, 16384), (64, 4096)):
        elems = (MIB // 4) // s
        rows.append(
            {
                "stride_elems": s,
                "stride_bytes": 4 * s,
                "elements_read": elems,
                "lines_touched": lines,
                "ms_per_pass": 0.1,
                "ns_per_element": 1e5 / elems,
                "line_gb_s": 1.0,
                "time_vs_first": 1.0,
                "checksum": float(elems if ok else elems - 1),
                "checksum_ok": ok,
            }
        )
    return {"ok": ok, "rows": rows, "line_bytes": 64}


def test_stride_report(tmp_path):
    p = stride.Params(array_bytes=MIB, strides=(1, 64), repeats=2)
    rep = stride_report.report(stride_rows(), p, tmp_path)
    assert rep.ok and rep.tables[0].title == "strided read" and len(rep.tables[0].rows) == 2
    assert rep.notes == [
        "cache line 64 B: strides up to 16 elements touch every line; 8 independent accumulators, min of 2 passes"
    ]
    assert (tmp_path / "stride.png").stat().st_size > 0
    bad = stride_report.report(stride_rows(ok=False), p, tmp_path)
    assert bad.failures == [
        "stride 1: checksum 262143.0 != 262144 elements read",
        "stride 64: checksum 4095.0 != 4096 elements read",
    ]


def test_gather_report(tmp_path):
    rows = [
        {
            "order": "sequential",
            "elements": 1000,
            "ms": 1.0,
            "ns_per_element": 1.0,
            "useful_gb_s": 4.0,
            "np_take_ms": 1.5,
            "checksum_ok": True,
            "vs_sequential": 1.0,
        },
        {
            "order": "random",
            "elements": 1000,
            "ms": 9.0,
            "ns_per_element": 9.0,
            "useful_gb_s": 0.4,
            "np_take_ms": 9.5,
            "checksum_ok": False,
            "vs_sequential": 9.0,
        },
    ]
    rep = gather_report.report(
        {"ok": False, "rows": rows}, gather.Params(src_bytes=256 * KIB, repeats=1), tmp_path
    )
    assert not rep.ok and rep.failures == ["random gather: checksum does not equal the sum of src"]
    assert rep.notes == ["every element of a 256 KiB array gathered once; min of 1"]
    assert rep.files == ["gather.png"] and (tmp_path / "gather.png").stat().st_size > 0


# -- paging -----------------------------------------------------------------------------------------
def paging_result(rss_second=16 * MIB, cow_delta=2 * MIB, parent_unchanged=True):
    steps = [
        ("allocate", 0, 0),
        ("touch first half", 16 * MIB, 16 * MIB),
        ("touch second half", 16 * MIB, rss_second),
    ]
    rows = [
        {
            "pages": "4KiB",
            "step": step,
            "touched_bytes": touched,
            "rss_bytes": 40 * MIB + delta,
            "rss_delta_bytes": delta,
            "minor_faults": touched // 4096,
            "step_s": 0.01,
            "us_per_fault": 0.2,
        }
        for step, touched, delta in steps
    ]
    cow = {
        "child_pages_written": 512,
        "child_uss_before_bytes": MIB,
        "child_uss_after_bytes": MIB + cow_delta,
        "child_uss_delta_bytes": cow_delta,
        "child_minor_faults": 512,
        "child_us_per_fault": 0.3,
        "parent_unchanged": parent_unchanged,
    }
    return {"ok": True, "rows": rows, "cow": cow, "cow_write_bytes": 2 * MIB, "page_bytes": 4096}


def test_paging_report(tmp_path):
    p = paging.Params(size_bytes=32 * MIB, cow_size_bytes=8 * MIB, page_modes=("4KiB",))
    rep = paging_report.report(paging_result(), p, tmp_path)
    assert rep.ok and rep.failures == []
    steps, cow = rep.tables
    assert [r["faults_if_4k"] for r in steps.rows] == [0, 4096, 4096]
    assert steps.rows[1]["rss_delta_mib"] == 16.0 and cow.rows == [rep.data["cow"]]
    assert cow.rows[0]["array"] == "8 MiB" and cow.rows[0]["expected_mib"] == 2.0
    assert rep.files == ["paging.png"] and (tmp_path / "paging.png").stat().st_size > 0


def test_paging_checks_allow_slack_and_name_what_is_off():
    slack = paging_report.SLACK_BYTES
    assert paging_report.check_steps(paging_result(rss_second=16 * MIB + slack)["rows"]) == []
    assert paging_report.check_steps(paging_result(rss_second=0)["rows"]) == [
        "4KiB 'touch second half': RSS grew 0 B, expected about 16 MiB"
    ]
    cow = paging_result(cow_delta=20 * MIB, parent_unchanged=False)["cow"]
    assert paging_report.check_cow(cow, 2 * MIB) == [
        "copy-on-write: child's private memory grew 20 MiB, expected about 2 MiB",
        "copy-on-write: the parent saw the child's writes",
    ]


# -- the model labs: their own main needs no communicator ------------------------------------------
def test_pagesize_report(tmp_path):
    p = pagesize.Params(num_blocks=200)
    res = pagesize.main(None, p)
    rep = pagesize_report.report(res, p, tmp_path)
    assert rep.ok and [r["page_units"] for r in rep.tables[0].rows] == list(p.page_units)
    assert rep.tables[1].title == "exercise 9 (700-token sequence)" and len(rep.tables[1].rows) == 2
    res["exercise_9"][1] = {**res["exercise_9"][1], "ok": False, "pages": 4}
    assert pagesize_report.report(res, p, tmp_path).failures == [
        "exercise 9, page 256: got 4 pages / 68 wasted, seed says 3 pages, 68 wasted"
    ]


def test_fragmentation_report(tmp_path):
    p = fragmentation.Params(num_steps=500)
    res = fragmentation.main(None, p)
    rep = fragmentation_report.report(res, p, tmp_path)
    assert rep.ok and [r["policy"] for r in rep.tables[0].rows] == ["contiguous first fit", "paged (16/page)"]
    assert rep.tables[0].title == "contiguous vs paged: capacity 10000, 500 steps, sizes 20-399"
    assert rep.notes[1] == "internal fragmentation: unused units in each block's last page (about half of 16)"
    bad = fragmentation_report.report({**res, "ok": False}, p, tmp_path)
    assert bad.failures == ["paged allocation failed with enough free pages (a bug)"]


def test_translation_report(tmp_path):
    p = translation.Params(expect={"A:0xC123": "0x134123", "B:0x4000": "0x1"})
    rep = translation_report.report(translation.main(None, p), p, tmp_path)
    assert rep.tables[0].title == "address translation, 16 KiB pages"
    assert rep.notes == [
        "offset = low 14 bits (page 0x4000 bytes), VPN = the rest; physical = frame * page size + offset"
    ]
    assert not rep.ok and rep.failures == ["B:0x4000 -> -, expected 0x1"]  # page 1 of B is not mapped
