"""The pipeline lab's statistics and report on synthetic stage stamps (no processes): an ideal
pipeline's stamps must reproduce the formulas exactly."""

import numpy as np
import pytest

from nodes.pipeline import Params
from playground.models import pipeline as pm
from playground.queueing import pipeline_report
from playground.queueing.pipeline_stats import bubble_row, chain_row, chain_stats, utilisation_rows


def ideal_stamps(stage_s, num_items, handoff_s=0.0, t0=100.0):
    """Each stage starts an item when it has it and has finished the previous one; per stage stamps."""
    out, ready = [], [t0] * num_items
    for t in stage_s:
        starts, ends, free = [], [], -1.0
        for i in range(num_items):
            start = max(ready[i], free)
            starts.append(start)
            ends.append(start + t)
            free = start + t
        out.append({"starts": starts, "ends": ends})
        ready = [e + handoff_s for e in ends]
    return out


def test_ideal_chain_matches_the_makespan_period_and_busy_model():
    stage_ms, n = [3.0, 5.0, 2.0], 100
    st = chain_stats(ideal_stamps([t / 1000 for t in stage_ms], n))
    assert st["makespan_s"] == pytest.approx(pm.pipeline_makespan_s(stage_ms, n) / 1000)  # 505 ms
    assert st["period_s"] == pytest.approx(0.005) and st["throughput_per_s"] == pytest.approx(200.0)
    assert st["busy_s"] == pytest.approx([0.3, 0.5, 0.2])
    assert st["mean_stage_s"] == pytest.approx([0.003, 0.005, 0.002])
    assert st["bubble"] == pytest.approx(1 - 1.0 / (3 * 0.505))
    row = chain_row("as given", stage_ms, n, st)
    assert row["stages_ms"] == "3 / 5 / 2" and row["model_makespan_ms"] == 505.0
    assert row["makespan_ms"] == pytest.approx(505.0) and row["dev_pct"] == pytest.approx(0.0, abs=1e-9)
    assert row["sequential_ms"] == 1000.0 and row["model_period_ms"] == 5.0
    assert row["period_ms"] == pytest.approx(5.0) and row["model_per_s"] == pytest.approx(200.0)
    util = utilisation_rows(stage_ms, n, st)
    assert [u["stage"] for u in util] == [0, 1, 2]
    for u in util:
        assert u["busy_pct"] == pytest.approx(u["model_busy_pct"])
        assert u["measured_stage_ms"] == pytest.approx(u["stage_ms"])


def test_ideal_equal_stages_have_the_formula_bubble_and_a_handoff_shows_as_extra():
    p, m, t = 4, 16, 0.003
    st = chain_stats(ideal_stamps([t] * p, m))
    row = bubble_row(m, p, 3.0, st)
    assert row["bubble_pct"] == pytest.approx(100 * 3 / 19) and row["model_pct"] == pytest.approx(
        100 * 3 / 19
    )
    assert row["dev_points"] == pytest.approx(0.0, abs=1e-9) and row["extra_ms"] == pytest.approx(
        0.0, abs=1e-9
    )
    slow = bubble_row(m, p, 3.0, chain_stats(ideal_stamps([t] * p, m, handoff_s=0.0005)))
    assert slow["extra_ms"] == pytest.approx(3 * 0.5)  # three hand-offs on the critical path
    assert slow["extra_per_step_ms"] == pytest.approx(1.5 / (m + p - 1))
    assert slow["bubble_pct"] > row["bubble_pct"]


def test_one_item_has_no_period():
    st = chain_stats(ideal_stamps([0.001, 0.002], 1))
    assert np.isnan(st["period_s"]) and np.isnan(st["throughput_per_s"])
    assert st["makespan_s"] == pytest.approx(0.003)


def rank_results(p, num_ranks):
    chains = [(name, list(ms)) for name, ms in p.chains()]
    out = []
    for r in range(num_ranks):
        res = {"ok": True, "chains": [], "bubbles": []}
        for name, ms in chains:
            stamps = ideal_stamps([t / 1000 for t in ms], p.num_items)
            res["chains"].append({"name": name, "stage_ms": ms, "stamps": stamps[r] if r < len(ms) else None})
        for m in p.micro_batches:
            stamps = ideal_stamps([p.bubble_stage_ms / 1000] * num_ranks, m)
            res["bubbles"].append({"micro_batches": m, "stamps": stamps[r]})
        out.append(res)
    return out


@pytest.mark.parametrize("work", ["sleep", "spin"])
def test_report(tmp_path, work):
    p = Params(stage_ms=(1.0, 3.0, 1.0), num_items=20, micro_batches=(1, 4), work=work)
    rep = pipeline_report.report(rank_results(p, 4), p, tmp_path)
    chains, util, bubbles = rep.tables
    assert chains.title == "Pipeline of 3 stage processes, 20 items"
    assert [r["chain"] for r in chains.rows] == [
        "as given",
        "stage 0 2x faster",
        "bottleneck (stage 1) 2x faster",
    ]
    assert [r["model_period_ms"] for r in chains.rows] == [3.0, 3.0, 1.5]
    assert all(r["dev_pct"] == pytest.approx(0, abs=1e-9) for r in chains.rows)
    assert len(util.rows) == 3 and bubbles.title == "Bubbles: 4 equal stages"
    assert [r["micro_batches"] for r in bubbles.rows] == [1, 4]
    assert bubbles.rows[0]["model_pct"] == pytest.approx(75.0) and bubbles.rows[0][
        "bubble_pct"
    ] == pytest.approx(75.0)
    assert rep.data == {"chains": chains.rows, "bubbles": bubbles.rows} and rep.files == ["bubbles.png"]
    assert (tmp_path / "bubbles.png").stat().st_size > 0
    assert "over 4 equal stages of 4 ms" in rep.notes[2]
    assert any(n.startswith("work=spin") for n in rep.notes) == (work == "spin")
