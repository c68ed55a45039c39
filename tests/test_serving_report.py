"""The serving lab's statistics and report on synthetic results (no processes): the figures are
computed as documented and every check fails the report when it should."""

import math
from types import SimpleNamespace

from playground.serving import serving_report, serving_stats

PARAMS = SimpleNamespace(
    workload="section46",
    num_requests=2,
    capacity_tokens=100,
    block_size=16,
    sample_prompt_tokens=100,
    sample_tokens=10,
    n=4,
)


def row(req_id, ttft, tpot, tokens=10, cached=0, digests=(1,)):
    return {
        "req_id": req_id,
        "ok": True,
        "queue_s": 0.0,
        "ttft_s": ttft,
        "e2e_s": ttft + tpot * (tokens - 1),
        "tpot_s": tpot,
        "num_tokens": tokens,
        "num_prompt_tokens": 20,
        "num_cached_tokens": cached,
        "preempted": 0,
        "digests": list(digests),
    }


def setup(policy="paged", caching=False, rows=(), elapsed=2.0, held=0, verified=None):
    engine = {"requests": 0, "running": 0, "waiting": 0, "peak_running": 3, "steps": 4, "preempted": 1}
    stats = {
        "capacity_slots": 100,
        "live_seqs": 0,
        "allocated_slots": held,
        "errors": {},
        "engine": engine,
    }
    samples = [(0.0, 1, 10, 16, 84), (1.0, 3, 40, 48, 52), (2.0, 0, 0, 0, 100)]
    log = [
        (0.0, 0, 40, 2, 0, 0.1, 48, 0, 0.05, 0.0, 0.05),
        (0.1, 2, 0, 2, 0, 0.1, 48, 40, 0.05, 0.02, 0.03),
        (0.2, 4, 0, 4, 0, 0.1, 64, 80, 0.05, 0.03, 0.02),
    ]
    client = {
        "requests": list(rows),
        "elapsed_s": elapsed,
        "verified": verified or {"checked": 0, "mismatched": 0},
    }
    return {
        "policy": policy,
        "prefix_caching": caching,
        "stats": stats,
        "samples": samples,
        "step_log": log,
        "clients": {"1": client},
    }


def test_replay_figures():
    s = setup(rows=[row(0, 0.1, 0.01, cached=10), row(1, 0.3, 0.03)])
    f = serving_stats.replay_figures(s)
    assert f["done"] == 2 and f["generated_tokens"] == 20 and f["tokens_per_s"] == 10.0
    assert f["ttft_p50_s"] == 0.2 and math.isclose(f["tpot_p50_ms"], 20.0)
    assert f["mean_batch"] == 3.0 and f["hit_rate_pct"] == 25.0 and f["peak_seqs"] == 3


def test_batch_figures_take_the_median_step():
    (r,) = serving_stats.batch_figures([{"batch": 4, "step_gaps_s": [0.01, 0.02, 0.03], "failed": 0}])
    assert r["step_ms"] == 20.0 and r["tokens_per_s"] == 200.0 and r["step_p10_ms"] < r["step_p90_ms"]


def test_a_clean_report_is_ok_and_every_check_can_fail(tmp_path):
    good = [setup("paged", rows=[row(0, 0.1, 0.01)]), setup("reserve_max", rows=[row(0, 0.2, 0.02)])]
    rep = serving_report.report(good, PARAMS, tmp_path)
    assert rep.ok, rep.failures
    assert any("the tokens/s of reserve-max" in n for n in rep.notes)
    differ = [
        setup("paged", rows=[row(0, 0.1, 0.01, digests=(1,))]),
        setup("contiguous", rows=[row(0, 0.1, 0.01, digests=(2,))]),
    ]
    assert "generated different tokens" in " ".join(serving_report.report(differ, PARAMS, tmp_path).failures)
    leak = [setup("paged", rows=[row(0, 0.1, 0.01)], held=16)]
    assert "still held" in " ".join(serving_report.report(leak, PARAMS, tmp_path).failures)
    wrong = [
        setup(
            rows=[row(0, 0.1, 0.01)], verified={"checked": 2, "mismatched": 1, "first_mismatch": "request 0"}
        )
    ]
    assert "differ from dense generation" in " ".join(serving_report.report(wrong, PARAMS, tmp_path).failures)


def test_the_samples_report_checks_the_lectures_pages(tmp_path):
    def mode(name, peak_slots, digests):
        return {
            "mode": name,
            "requests": [row(0, 0.1, 0.01, digests=digests)],
            "peak_allocated_slots": peak_slots,
            "peak_used_slots": peak_slots,
            "cow_copies": 0,
            "moved_slots": 0,
            "elapsed_s": 1.0,
            "held_after": 0,
        }

    params = SimpleNamespace(**{**vars(PARAMS), "workload": "samples"})
    s = setup()
    s["clients"]["1"]["modes"] = [mode("copies", 28 * 16, (1, 2)), mode("fork", 10 * 16, (1, 2))]
    assert serving_report.report([s], params, tmp_path).ok
    s["clients"]["1"]["modes"][1] = mode("fork", 11 * 16, (1, 3))
    failures = " ".join(serving_report.report([s], params, tmp_path).failures)
    assert "11 pages at the peak, exercise 10 says 10" in failures and "forked samples differ" in failures
