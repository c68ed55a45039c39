"""The serving lab's statistics and report on synthetic results (no processes): the figures are
computed as documented and every check fails the report when it should."""

import math
from types import SimpleNamespace

from playground.serving import serving_report, serving_stats, step_model
from playground.transformer.config import ModelConfig

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
    engine["finished_requests"] = sum(1 for r in rows if r["ok"])
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
    twice = [setup(rows=[row(0, 0.1, 0.01), row(1, 0.1, 0.01)])]
    twice[0]["stats"]["answers"] = {"loaded": 1, "replayed": 1}  # the journal's answer generated again too
    assert (
        "3 generations for 2 requests answered: 1 generated twice"
        in serving_report.report(twice, PARAMS, tmp_path).failures[0]
    )
    twice[0]["resumed"], twice[0]["stats"]["engine"]["finished_requests"] = True, 1
    rep = serving_report.report(twice, PARAMS, tmp_path)
    assert rep.ok and any("resumed after a restart: 1 answers kept in its journal" in n for n in rep.notes)


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
    s["stats"]["engine"]["finished_requests"] = 2
    s["clients"]["1"]["modes"] = [mode("copies", 28 * 16, (1, 2)), mode("fork", 10 * 16, (1, 2))]
    assert serving_report.report([s], params, tmp_path).ok
    s["clients"]["1"]["modes"][1] = mode("fork", 11 * 16, (1, 3))
    failures = " ".join(serving_report.report([s], params, tmp_path).failures)
    assert "11 pages at the peak, exercise 10 says 10" in failures and "forked samples differ" in failures


def test_shown_text_starts_at_a_whole_character_and_gives_the_model_the_character_it_finished():
    paging = "分页".encode()  # 6 bytes, two characters
    prompt = list(paging[1:5])  # starts inside 分, ends inside 页
    tokens = list(paging[5:]) + list("缓".encode())[:2]  # finishes 页, stops inside 缓
    assert serving_stats.shown_text(prompt, tokens) == ("", "页")
    assert serving_stats.shown_text(list(paging), [0xFF, *"存".encode()]) == ("分页", "\ufffd存")


def test_step_split_sums_the_parts_and_takes_medians_per_decode_batch():
    log = [  # STEP_LOG_COLUMNS: a prefill, then decode steps of 2, 2 and 4 sequences
        (0.0, 0, 40, 2, 0, 0.010, 48, 0, 0.006, 0.002, 0.002),
        (0.1, 2, 0, 2, 0, 0.002, 48, 40, 0.001, 0.0005, 0.0005),
        (0.2, 2, 0, 2, 0, 0.004, 48, 42, 0.002, 0.001, 0.001),
        (0.3, 4, 0, 4, 0, 0.005, 64, 80, 0.003, 0.001, 0.001),
    ]
    split = serving_stats.step_split(log, [0.009, 0.002, 0.002, 0.004])
    assert split["steps"] == 4 and split["decode_only_steps"] == 3 and split["decodes"] == 8
    assert math.isclose(split["step_s"], 0.021) and math.isclose(split["predicted_s"], 0.017)
    assert split["by_batch"] == {
        2: {"steps": 2, "measured_s": 0.003, "predicted_s": 0.002},
        4: {"steps": 1, "measured_s": 0.005, "predicted_s": 0.004},
    }


def test_the_decode_step_model_reads_the_weights_once_and_the_kv_of_every_sequence():
    shape = step_model.StepShape.of(ModelConfig(layers=2, d_model=64, heads=4, context=64))
    assert (
        shape.matmul_params == 2 * 12 * 64 * 64 + 256 * 64 and shape.weight_bytes == 4 * shape.matmul_params
    )
    assert shape.kv_bytes_per_token == 2 * 2 * 64 * 4
    rates = step_model.MachineRates(1e9, 5e8, 5e8, 1e10, 1e-5, 1e-4, "test")
    one = step_model.predict_step(shape, rates, 1, 1, 100)
    assert math.isclose(one["weights_s"], shape.weight_bytes / 1e9)  # one row: streamed at the read rate
    assert math.isclose(one["kv_s"], 100 * shape.kv_bytes_per_token / 1e9)
    many = step_model.predict_step(shape, rates, 8, 8, 800)
    assert math.isclose(many["weights_s"], shape.weight_bytes / 5e8 + 2 * shape.matmul_params * 8 / 1e10)
    assert math.isclose(many["overhead_s"], 8e-5 + 1e-4)


def test_shown_text_keeps_a_table_row_one_line():
    assert serving_stats.shown_text(list(b"a\nb"), list(b"|c\n")) == ("a⏎b", "¦c⏎")


RATES = {
    "read_bytes_per_s": 10e9,
    "pack_bytes_per_s": 5e9,
    "gemm_flops_per_s": 50e9,
    "per_seq_s": 20e-6,
    "per_step_s": 100e-6,
    "source": "measured at start",
}
SHAPE = {"weight_bytes": 4e6, "kv_bytes_per_token": 4096}


def test_the_step_models_verdict_names_the_rows_outside_its_band(tmp_path):
    """measured / model 1.82, 2.01 and 1.61 (as the issue saw) beside one row at 1.10: the note
    counts the rows inside 0.80-1.25 from those values and names the three outside."""
    batches = [
        {"batch": b, "step_gaps_s": [t] * 3, "failed": 0}
        for b, t in ((1, 0.0182), (2, 0.0201), (4, 0.0161), (8, 0.011))
    ]
    by_batch = {b: {"predicted_s": 0.01, "measured_s": 0.01} for b in (1, 2, 4, 8)}
    s = {**setup("paged"), "clients": {"1": {"batches": batches}}, "split": {"by_batch": by_batch}}
    params = SimpleNamespace(**{**vars(PARAMS), "workload": "batch"})
    rep = serving_report.report([s], params, tmp_path, {"rates": RATES, "shape": SHAPE})
    (ratios,) = [[r["measured_over_model"] for r in t.rows] for t in rep.tables]
    assert [round(r, 2) for r in ratios] == [1.82, 2.01, 1.61, 1.1]
    (note,) = [n for n in rep.notes if "band the model is held to" in n]
    assert note.endswith(
        "within 25% (0.80-1.25) is the band the model is held to: 1 of 4 rows; outside it: paged batch 1 1.82, "
        "paged batch 2 2.01, paged batch 4 1.61"
    )
