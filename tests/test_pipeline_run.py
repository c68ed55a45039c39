"""A real pipeline of stage processes.

By default: the result's shape, the models, and what holds whatever the timing (a stage is never
busy longer than the run, so the bubble is a share in [0, 1]). How close the period and bubbles
land to the formulas is the `timing` test (`pytest -m timing`); the statistics themselves are
checked exactly on synthetic stamps in test_pipeline_stats.py.
"""

import pytest

from playground.cli.testing import run_scenario


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline")
    code, result, stdout, stderr = run_scenario(
        "pipeline",
        out=out,
        ranks=4,
        timeout_s=50,
        sets=[
            "params.stage_ms=[1,3,1]",
            "params.num_items=40",
            "params.speedup_variants=false",
            "params.bubble_stage_ms=3",
            "params.micro_batches=[1,16]",
        ],
    )
    assert code == 0, stdout + stderr
    return result, out / "latest"


@pytest.mark.timeout(60)
def test_pipeline_rows_models_and_invariants(pipeline_run):
    result, run_dir = pipeline_run
    (chain,) = result["chains"]
    assert chain["model_makespan_ms"] == 5 + 39 * 3 and chain["model_period_ms"] == 3
    assert chain["sequential_ms"] == 40 * 5 and chain["model_per_s"] == pytest.approx(1000 / 3)
    assert chain["makespan_ms"] > 0 and chain["period_ms"] > 0
    assert chain["period_ms"] <= chain["makespan_ms"] / 39  # the sink's 39 gaps fit in the makespan
    utilisation = result["tables"][1]["rows"]
    assert [u["stage"] for u in utilisation] == [0, 1, 2]
    assert all(0 < u["busy_pct"] <= 100 for u in utilisation)  # a stage works inside the run
    one, sixteen = result["bubbles"]
    assert (one["micro_batches"], sixteen["micro_batches"]) == (1, 16)
    assert one["model_pct"] == pytest.approx(75.0) and sixteen["model_pct"] == pytest.approx(300 / 19)
    assert one["model_makespan_ms"] == 4 * 3 and sixteen["model_makespan_ms"] == 19 * 3
    for b in (one, sixteen):
        assert 0 <= b["bubble_pct"] < 100
        assert b["dev_points"] == pytest.approx(b["bubble_pct"] - b["model_pct"])
    assert result["files"] == ["bubbles.png"] and (run_dir / "bubbles.png").stat().st_size > 0


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_pipeline_bottleneck_and_bubbles(pipeline_run):
    result, _ = pipeline_run
    (chain,) = result["chains"]
    assert 2.5 < chain["period_ms"] < 4.5  # one item per bottleneck time
    one, sixteen = result["bubbles"]
    assert 60 < one["bubble_pct"] < 95
    assert sixteen["bubble_pct"] < one["bubble_pct"]
