"""The benchmark's check of each result never runs beside another rank's timed call: it reads the
whole buffer twice, and with more ranks than cores it used to slow the slowest rank's median by
11-16% (playground/collectives/measure.py)."""

import threading
import time
from types import SimpleNamespace

import pytest

import playground.collectives.measure as measure_mod
from playground.collectives.check import Tally
from playground.comm.world import run_local

pytestmark = pytest.mark.timeout(60)


def test_no_rank_checks_a_result_while_another_is_in_its_timed_call(monkeypatch):
    n, warmup, iters = 3, 1, 4
    events: list[tuple[str, int, int, int]] = []  # (what, rank, iteration, monotonic ns)
    local = threading.local()
    run, check = measure_mod.run_collective, Tally.check

    def slow_last_rank(comm, *args):
        out = run(comm, *args)
        local.rank, local.it = comm.rank, getattr(local, "it", -1) + 1
        if comm.rank == n - 1:
            time.sleep(0.02)  # a rank that finishes last, as under load; still inside its timed call
        events.append(("end", comm.rank, local.it, time.monotonic_ns()))
        return out

    def spy_check(self, out, want, it):
        events.append(("check", local.rank, it, time.monotonic_ns()))
        return check(self, out, want, it)

    monkeypatch.setattr(measure_mod, "run_collective", slow_last_rank)
    monkeypatch.setattr(Tally, "check", spy_check)
    p = SimpleNamespace(
        collective="allreduce",
        dtype="float32",
        op="sum",
        check=True,
        warmup=warmup,
        iters=iters,
        segment_bytes=None,
        ranks_per_node=None,
    )
    rows = run_local(n, lambda comm: measure_mod.measure(comm, p, "ring", 4096), timeout_s=20)

    assert [r["wrong"] for r in rows] == [0] * n
    for it in range(warmup, warmup + iters):
        ends = [t for what, _, i, t in events if what == "end" and i == it]
        checks = [t for what, _, i, t in events if what == "check" and i == it]
        assert len(ends) == len(checks) == n
        assert min(checks) >= max(ends), f"iteration {it}: a rank checked while another was timed"
