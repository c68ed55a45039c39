"""`bench serving` and `bench speculative` at tiny sizes: the sweep's figures from records (pure),
the queueing models' knees, and each command end to end (a real server, real HTTP)."""

import json
import math

import numpy as np
import pytest
from tools import importable, need

from playground.models.queueing import batched_capacity_per_s, batched_sojourn_s
from playground.serving.load.arrivals import Workload, poisson_arrivals_s, prompts, scaled_trace_s
from playground.serving.load.client import RequestRecord
from playground.serving.load.load_stats import QueueModel, Slo, fit_model, knee, max_rate_meeting, rate_row


def test_poisson_arrivals_have_the_rate_and_a_trace_is_scaled_to_it():
    gaps = np.diff(poisson_arrivals_s(50.0, 20000, np.random.default_rng(0)))
    assert abs(gaps.mean() - 0.02) < 0.001 and abs(gaps.std() - 0.02) < 0.001  # exponential: sd = mean
    scaled = scaled_trace_s(np.array([0.0, 1.0, 3.0, 6.0]), 2.0, 6)
    assert len(scaled) == 6 and abs(6 / scaled[-1] - 2.0) < 1e-9
    got = prompts(
        Workload(prompt_tokens=5, long_prompt_tokens=50, long_share=0.5),
        200,
        bytes(range(256)) * 4,
        np.random.default_rng(1),
    )
    assert {len(p) for p in got} == {5, 50}


def test_a_rate_row_counts_goodput_under_the_slo_and_little_in_flight():
    fast = RequestRecord(0.0, 8, ttft_s=0.1, e2e_s=1.0, output_tokens=10)  # TPOT 0.1 s: misses a 50 ms SLO
    slow_start = RequestRecord(0.5, 8, ttft_s=1.5, e2e_s=1.6, output_tokens=11)  # TTFT over 1 s
    good = RequestRecord(1.0, 8, ttft_s=0.2, e2e_s=0.65, output_tokens=10)  # TPOT 50 ms
    failed = RequestRecord(1.5, 8, error="HTTP 500")
    row = rate_row("x", 2.0, [fast, slow_start, good, failed], Slo(1.0, 0.05))
    assert row["failed"] == 1 and row["slo_met"] == 0.25
    assert math.isclose(row["req_s"], 3 / 2.1) and math.isclose(row["goodput_req_s"], 1 / 2.1)
    assert math.isclose(row["in_flight"], (1.0 + 1.6 + 0.65) / 2.1)  # Little: time in system / window


def test_the_knee_and_the_models_predictions():
    rows = [{"rate": r, "failed": 0, "e2e_p99_ms": p} for r, p in ((1, 100), (2, 150), (4, 250), (8, 900))]
    assert knee(rows) == 4 and max_rate_meeting(rows, "e2e_p99_ms", 200) == 2
    model = QueueModel(alone_s=0.1, decode_steps=31, per_seq_step_s=0.001)
    assert math.isclose(model.batched_mean_s(1 / 0.031 / 2), 0.2)  # rho 1/2: twice alone
    assert math.isclose(model.batched_knee(), batched_capacity_per_s(31, 0.001) / 2)
    assert batched_sojourn_s(40.0, 0.1, 31, 0.001) == math.inf
    assert 1 < model.md1_knee() < 10 and math.isclose(model.md1_p99_s(model.md1_knee()), 0.2, rel_tol=1e-3)
    fitted = fit_model(
        [{"e2e_p50_ms": 100.0, "in_flight": b, "tpot_mean_s": 0.002 + 0.0005 * b} for b in (1, 3, 9)], 32
    )
    assert fitted and math.isclose(fitted.per_seq_step_s, 0.0005) and fitted.alone_s == 0.1


@pytest.mark.timeout(90)
def test_bench_serving_sweeps_a_real_server_and_writes_its_report(tmp_path):
    need(importable("uvicorn") and importable("httpx"), "pip install -e '.[serve]'")
    from playground.cli import main

    code = main(
        [
            "bench",
            "serving",
            "--model",
            "random",
            "--rates",
            "20,40",
            "--requests",
            "4",
            "--output-tokens",
            "4",
            "--setups",
            "prefill-first,chunked",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "latest" / "result.json").read_text())
    assert [(r["setup"], r["rate"]) for r in result["rows"]] == [
        ("prefill-first", 20),
        ("prefill-first", 40),
        ("chunked", 20),
        ("chunked", 40),
    ]
    assert all(r["failed"] == 0 and r["e2e_p99_ms"] > 0 and r["tpot_p50_ms"] > 0 for r in result["rows"])
    assert (tmp_path / "latest" / "latency.png").stat().st_size > 0
    assert any("knee" in n for n in result["notes"]) and len(result["tables"]) == 3


def test_bench_speculative_measures_identical_tokens_at_each_batch(tmp_path):
    from playground.cli import main

    code = main(
        [
            "bench",
            "speculative",
            "--model",
            "random",
            "--batch-sizes",
            "1,3",
            "--iters",
            "1",
            "--output-tokens",
            "12",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (table,) = json.loads((tmp_path / "latest" / "result.json").read_text())["tables"]
    assert [(r["workload"], r["batch"]) for r in table["rows"]] == [
        ("fresh", 1),
        ("fresh", 3),
        ("quoting", 1),
        ("quoting", 3),
    ]
    assert all(r["identical"] for r in table["rows"])


def test_a_quoting_prompt_holds_a_passage_then_its_first_words_again_and_bad_workloads_are_one_line(capsys):
    from playground.cli import main
    from playground.serving.speculative_bench import PROMPT_TOKENS, workload_prompts

    quoting = workload_prompts("quoting", 3, 64, seed=0)
    assert len(quoting) == 3 and len(set(map(tuple, quoting))) == 3
    for p in quoting:
        assert len(p) == 32 + PROMPT_TOKENS and p[-PROMPT_TOKENS:] == p[:PROMPT_TOKENS]
    assert all(len(p) == PROMPT_TOKENS for p in workload_prompts("fresh", 2, 64, seed=0))
    assert main(["bench", "speculative", "--workloads", "fresh,long"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--workloads" in err and "fresh, quoting" in err


def test_bench_serving_bad_flags_are_one_line(capsys):
    from playground.cli import main

    assert main(["bench", "serving", "--setups", "fast"]) == 2
    assert "--setups" in capsys.readouterr().err
    assert main(["bench", "serving", "--rates", "1,x"]) == 2
    assert "--rates" in capsys.readouterr().err
