"""The benchmarks behind docs/results/observability.md, at tiny sizes: they run, and their tables
hold what they say (their numbers are for a quiet machine, not checked here)."""

import json

import pytest

from playground.commands import flight_bench, live_bench, straggler_bench

pytestmark = pytest.mark.timeout(120)


def test_flight_bench_compares_the_recorder_off_and_on(tmp_path):
    assert (
        flight_bench.main(["--rounds", "1", "--calls", "200", "--iters", "50", "--out", str(tmp_path)]) == 0
    )
    rows = json.loads((tmp_path / "flight_bench.json").read_text())
    assert [r["measure"] for r in rows] == ["CPU per call, greenlets (us)", "time per call, launched (us)"]
    assert all(r["off_us"] > 0 and r["on_us"] > 0 and r["rounds"] == 1 for r in rows)
    assert "| CPU per call, greenlets (us) |" in (tmp_path / "flight_bench.md").read_text()


def test_straggler_bench_counts_hits_and_false_positives(tmp_path):
    assert straggler_bench.main(["--runs", "1", "--workloads", "collective", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "straggler_bench.json").read_text())
    assert row["workload"] == "collective" and row["runs"] == 1
    assert row["hits"] + row["misses"] + row["others_named"] >= 1 and row["false_positives"] in (0, 1)
    with pytest.raises(SystemExit):
        straggler_bench.main(["--workloads", "nosuch"])


def test_live_bench_compares_a_plain_run_and_a_watched_one(tmp_path):
    argv = ["--rounds", "1", "--iters", "50", "--workloads", "collective", "--out", str(tmp_path)]
    assert live_bench.main(argv) == 0
    (row,) = json.loads((tmp_path / "live_bench.json").read_text())
    assert row["measure"] == "8-byte all-reduce (us)" and row["plain"] > 0 and row["live"] > 0
    assert "| 8-byte all-reduce (us) |" in (tmp_path / "live_bench.md").read_text()
    with pytest.raises(SystemExit):
        live_bench.main(["--workloads", "nosuch"])
