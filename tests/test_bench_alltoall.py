"""`bench alltoall|alltoallv|gather|scatter|sendrecv` as a user runs it: nccl-tests' rows with their
sizes and busbw factors, both forms checked, auto's pick named; a bad alltoallv layout is one line."""

import json

import pytest

from playground.cli.testing import run_cli


@pytest.mark.timeout(90)
def test_bench_alltoall_every_algorithm_in_both_forms_in_bfloat16(tmp_path):
    args = ["bench", "alltoall", "--ranks", "3", "--transport", "shm", "--sizes", "96,48KiB"]
    args += ["--algo", "pairwise,bruck,scattered,auto", "--dtype", "bfloat16", "--inplace"]
    proc = run_cli([*args, "--iters", "2", "--warmup", "1", "--out", str(tmp_path)], timeout_s=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "latest" / "result.json").read_text())
    rows = result["rows"]
    assert [r["algorithm"].split("->")[0] for r in rows] == [
        a for a in ("pairwise", "bruck", "scattered", "auto") for _ in (0, 1)
    ]
    assert rows[-1]["algorithm"] in ("auto->pairwise", "auto->bruck", "auto->scattered")
    for r in rows:
        assert r["wrong"] == 0 and r["ip_wrong"] == 0 and r["dtype"] == "bfloat16" and r["op"] == "none"
        assert r["count"] == r["size"] // 2 and r["count"] % 3 == 0  # whole blocks of the 3 ranks
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 / 3)
    assert "busbw = algbw x (N-1)/N" in proc.stdout


def test_a_layout_that_does_not_add_up_is_one_line_naming_the_key(tmp_path):
    bad = ["bench", "alltoallv", "--ranks", "2", "--sizes", "16", "--out", str(tmp_path)]
    proc = run_cli([*bad, "--set", "params.counts=[[1,2],[3,1]]"], timeout_s=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --set params.counts=[[1,2],[3,1]]: row 0 adds up to 3 elements, but each rank puts in 4 (float32)"
    ]
    assert not (tmp_path / "latest").exists()
