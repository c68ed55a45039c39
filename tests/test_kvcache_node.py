"""End to end: `python -m playground run kvcache*` with real server and client processes."""

import pytest

from playground.cli.testing import run_scenario


@pytest.mark.timeout(90)
def test_section46_small_all_policies(tmp_path):
    code, result, out, err = run_scenario(
        "kvcache",
        out=tmp_path,
        ranks=3,
        timeout_s=80,
        sets=["params.num_requests=150", "params.capacity_tokens=30000", "params.check_invariants=true"],
    )
    assert code == 0, out + err
    rows = {r["policy"]: r for r in result["rows"]}
    assert set(rows) == {"paged", "contiguous", "reserve_max"}
    assert all(r["completed"] + r["failed"] == 150 for r in rows.values())
    assert rows["paged"]["peak_seqs"] > 2 * rows["reserve_max"]["peak_seqs"]
    assert rows["paged"]["external_pct"] == 0 and rows["reserve_max"]["internal_pct"] > 50
    assert (tmp_path / "latest" / "kvcache-memory.png").stat().st_size > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scenario,unshared,shared", [("kvcache-prefix", 28, 10), ("kvcache-ex10", 600, 166)])
def test_lecture_page_counts_from_the_real_server(tmp_path, scenario, unshared, shared):
    code, result, out, err = run_scenario(
        scenario, out=tmp_path, timeout_s=50, sets=["params.policies=[paged]"]
    )
    assert code == 0, out + err
    pages = {r["mode"]: r["pages"] for r in result["rows"]}
    assert pages == {"unshared": unshared, "fork": shared, "prefix_cache": shared}
    assert all(r["reads_exact"] and r["leaked_slots"] == 0 for r in result["rows"])


@pytest.mark.timeout(60)
def test_bench_reports_throughput(tmp_path):
    code, result, out, err = run_scenario(
        "kvcache-bench", out=tmp_path, ranks=3, timeout_s=50, sets=["params.bench_duration_s=0.5"]
    )
    assert code == 0, out + err
    row = result["rows"][0]
    assert row["clients"] == 2 and row["ops_per_s"] > 0 and row["append_p99_us"] >= row["append_p50_us"] > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sets,ranks,expect",
    [
        (["params.policies=[buddy]"], None, "params.policies[0]"),
        (["params.block_size=0"], None, "params.block_size"),
        ([], 1, "ranks"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, sets, ranks, expect):
    code, _, out, err = run_scenario("kvcache", out=tmp_path, ranks=ranks, sets=sets, timeout_s=50)
    assert code == 2
    assert expect in err + out and "Traceback" not in err
