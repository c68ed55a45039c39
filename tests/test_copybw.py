"""`bench copy`: the copy bandwidth on one core and all, and the shm ring all-reduce's bound. Checked:
the pass count's closed form, and that the command writes both tables with one row per size/kind
and per size/rank count; no rate is asserted."""

import json

import pytest

from playground.cli.testing import run_cli
from playground.commands.copybw import KINDS, ring_passes


def test_ring_passes_count_the_copies_and_reductions_of_each_step():
    # N = 2: copy in (2), one reduction (3), all-gather copy in and out (4): 9 chunks of S/2
    assert ring_passes(2) == 4.5
    assert ring_passes(4) == 23 / 4 and ring_passes(8) == 51 / 8


@pytest.mark.timeout(60)
def test_bench_copy_writes_rates_and_bounds(tmp_path):
    proc = run_cli(
        [
            "bench",
            "copy",
            "--sizes",
            "1MiB,2MiB",
            "--iters",
            "2",
            "--rank-counts",
            "2,8",
            "--out",
            str(tmp_path),
        ],
        timeout_s=50,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(next(tmp_path.glob("*-copy/copy.json")).read_text())
    assert [(r["size"], r["kind"]) for r in got["rows"]] == [
        (s, k) for s in (1 << 20, 2 << 20) for k in KINDS
    ]
    assert all(r["one_core"] > 0 and r["all_cores"] > 0 for r in got["rows"])
    assert [(b["size"], b["ranks"]) for b in got["bounds"]] == [
        (s, n) for s in (1 << 20, 2 << 20) for n in (2, 8)
    ]
    b8 = next(b for b in got["bounds"] if b["ranks"] == 8 and b["size"] == 1 << 20)
    assert b8["bound_ms"] == pytest.approx(8 * ring_passes(8) * (1 << 20) / (2 * b8["rate_gbps"] * 1e9) * 1e3)
    assert "| 2 MiB | 8 |" in proc.stdout
