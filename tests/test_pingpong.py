"""nodes/pingpong.py: how many exchanges each size gets within its time budget (pure), and on a
real shaped link: beta the link's rate, fewer round trips where they are slow."""

import json
import re

import pytest

from nodes.pingpong import Counts, Params, counts_within
from playground.cli.testing import run_cli

DEFAULT = Params()


def planned_s(c: Counts, round_trip_s: float) -> float:
    """What the counts cost after the probe: ours and raw, ping-pong round trips and streamed
    messages (each about half a round trip)."""
    return 2 * ((c.warmup + c.iters) * round_trip_s + c.bursts * c.window * round_trip_s / 2)


def test_a_fast_link_runs_every_iteration():
    assert counts_within(3.0, 100e-6, DEFAULT) == Counts(5, 50, 8, 10)


def test_without_a_budget_the_counts_are_the_params():
    p = Params(iters=7, warmup=1, window=3)
    assert counts_within(None, 10.0, p) == Counts(1, 7, 3, 3)


def test_a_size_that_does_not_fit_runs_the_minimum():
    # 4 MiB on 100mbit: 0.7 s a round trip; 3 timed round trips, so that the median drops a hiccup
    assert counts_within(3.0, 0.7, DEFAULT) == Counts(warmup=0, iters=3, window=1, bursts=1)
    assert counts_within(-3.0, 1e-6, DEFAULT) == Counts(0, 3, 1, 1)  # the earlier sizes overran
    assert counts_within(0.1, 1.0, Params(iters=1)) == Counts(0, 1, 1, 1)  # never more than iters


def test_a_slow_size_gets_what_fits():
    # 1 MiB on 100mbit: 0.176 s a round trip; 1.41 s each for ours and raw: 4 round trips (0.70 s),
    # then 8 streamed messages (0.70 s) in 4 bursts of 2
    assert counts_within(3.0, 0.176, DEFAULT) == Counts(warmup=0, iters=4, window=2, bursts=4)


@pytest.mark.parametrize("budget_s", [0.1, 0.5, 2.0, 10.0])
def test_counts_fit_the_budget_and_never_exceed_the_params(budget_s):
    for exponent in range(-6, 2):
        for mantissa in (1.0, 2.5, 5.0):
            rt = mantissa * 10.0**exponent
            c = counts_within(budget_s, rt, DEFAULT)
            assert 0 <= c.warmup <= 5 and 3 <= c.iters <= 50 and 1 <= c.window <= 8 and 1 <= c.bursts <= 10
            minimum = planned_s(Counts(0, 3, 1, 1), rt)
            assert planned_s(c, rt) <= max(budget_s - rt, minimum) + 1e-12, (rt, c)
            if 1000 * rt < budget_s:  # small messages on any link: everything
                assert c == Counts(5, 50, 8, 10)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_on_a_100mbit_link_beta_is_its_rate_and_slow_sizes_run_fewer_round_trips(as_root, runs_dir):
    proc = run_cli(
        ["run", "pingpong", "--hosts", "2", "--link", "100mbit", "--out", str(runs_dir)]
        + ["--set", "params.sizes=[64,256KiB,1MiB]", "--set", "params.budget_s=1.5"],
        timeout_s=80,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fit = re.search(r"beta = ([\d.]+) GB/s", proc.stdout)
    assert fit and float(fit.group(1)) * 1e9 == pytest.approx(100e6 / 8, rel=0.10)
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    iters = {r["size"]: r["iters"] for r in result["rows"]}
    assert len(iters) == 3 and iters[64] >= iters[256 << 10] >= iters[1 << 20]  # slower, fewer
    assert iters[64] > 10  # 64 B: about 1 ms a round trip (the probe's, perhaps cold, decides)
    assert 3 <= iters[1 << 20] < 50  # 1 MiB: 0.18 s a round trip, of which 4.5 s hold few
    assert result["budget_s"] == 1.5
    assert "time budget: 1.5 s per size, 4.5 s for 3 sizes (params.budget_s)" in " ".join(proc.stdout.split())
