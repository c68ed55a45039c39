"""A real pipeline of stage processes: bottleneck period and bubbles near the formulas."""

import pytest

from playground.testing import run_scenario


@pytest.mark.timeout(60)
def test_pipeline_bottleneck_and_bubbles(tmp_path):
    code, result, out, err = run_scenario(
        "pipeline",
        out=tmp_path,
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
    assert code == 0, out + err
    (chain,) = result["chains"]
    assert chain["model_makespan_ms"] == 5 + 39 * 3
    assert 2.5 < chain["period_ms"] < 4.5  # one item per bottleneck time
    one, sixteen = result["bubbles"]
    assert one["model_pct"] == pytest.approx(75.0) and sixteen["model_pct"] == pytest.approx(300 / 19)
    assert 60 < one["bubble_pct"] < 95
    assert sixteen["bubble_pct"] < one["bubble_pct"]
