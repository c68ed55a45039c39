"""nccl-tests rows built one way for ours and the baselines (playground.collectives.bench_report), the one
wrong-element count (check.count_wrong), and bench's ratio computed from rows of that one builder."""

import json

import numpy as np
import pytest

from playground.baselines import common
from playground.baselines.common import layout, layouts
from playground.collectives.bench_report import (
    COLUMNS,
    IN_PLACE_COLUMNS,
    add_model_columns,
    bench_report,
    build_row,
    closing_lines,
)
from playground.collectives.check import count_wrong
from playground.collectives.registry import collective_time_s
from playground.commands.bench import baseline_table, compare
from playground.display.report import format_cell
from playground.models.calibration import ModelSource
from playground.models.costs import PRESETS


def _records(medians_us, wrongs=None, **extra):
    """One (algorithm, size) as each rank records it."""
    wrongs = wrongs or [0] * len(medians_us)
    return [{"median_us": t, "wrong": w, **extra} for t, w in zip(medians_us, wrongs, strict=True)]


def _node_rows(medians_by_size: dict[int, list[float]], algorithm="ring", nranks=2) -> list[list[dict]]:
    """What nodes/collective.py's ranks return as "rows": one list per rank, one record per size."""
    return [
        [
            {"size": size, "count": size // 4, "algorithm": algorithm, "median_us": ts[r], "wrong": 0}
            for size, ts in medians_by_size.items()
        ]
        for r in range(nranks)
    ]


# -- the row -------------------------------------------------------------------------------------


def test_time_is_the_slowest_ranks_median():
    row = build_row("allreduce", _records([5.0, 9.0, 7.0]), 1000, 250, "float32", "sum", "ring")
    assert row["time_us"] == 9.0


@pytest.mark.parametrize(
    "collective, factor_at_4",
    [("allreduce", 1.5), ("allgather", 0.75), ("reduce_scatter", 0.75), ("broadcast", 1.0), ("reduce", 1.0)],
)
def test_algbw_is_size_over_time_and_busbw_applies_nccl_tests_factor(collective, factor_at_4):
    row = build_row(collective, _records([1000.0] * 4), 2_000_000, 500_000, "float32", "sum", "x")
    assert row["algbw_gbps"] == pytest.approx(2.0)  # 2e6 bytes in 1 ms = 2 GB/s (1e9 bytes/s)
    assert row["busbw_gbps"] == pytest.approx(2.0 * factor_at_4)
    assert row["op"] == ("sum" if collective in ("allreduce", "reduce_scatter", "reduce") else "none")


def test_nothing_is_rounded():
    row = build_row("allreduce", _records([3.14159, 1.0]), 8, 2, "float32", "sum", "rd")
    assert row["time_us"] == 3.14159
    assert row["algbw_gbps"] == 8 / 3.14159 / 1e3 and row["busbw_gbps"] == row["algbw_gbps"] * 1.0


def test_zero_time_has_no_bandwidth():
    row = build_row("allreduce", _records([0.0, 0.0]), 64, 16, "float32", "sum", "ring")
    assert row["time_us"] == 0.0 and row["algbw_gbps"] is None and row["busbw_gbps"] is None
    assert json.loads(json.dumps(row, allow_nan=False))["busbw_gbps"] is None  # strict JSON: null
    assert format_cell(row["busbw_gbps"]) == "-"
    fine = build_row("allreduce", _records([2.0, 2.0]), 64, 16, "float32", "sum", "ring")
    assert closing_lines([row])[1] == "avg busbw (GB/s): ring -"
    assert closing_lines([row, fine])[1] == "avg busbw (GB/s): ring 0.032"  # the zero-time row is left out


def test_row_keys_are_the_table_columns():
    row = build_row("allreduce", _records([1.0, 2.0]), 8, 2, "float32", "sum", "ring")
    assert list(row) == list(COLUMNS)


def test_in_place_columns_join_the_same_row():
    recs = _records([4.0, 6.0], [0, 0], ip_median_us=2.0, ip_wrong=0)
    recs[1]["ip_median_us"], recs[1]["ip_wrong"] = 8.0, 5
    row = build_row("allreduce", recs, 4000, 1000, "float32", "sum", "ring")
    assert list(row) == [*COLUMNS, *IN_PLACE_COLUMNS]
    assert (row["time_us"], row["wrong"], row["ip_time_us"], row["ip_wrong"]) == (6.0, 0, 8.0, 5)
    assert row["ip_algbw_gbps"] == pytest.approx(0.5) and row["ip_busbw_gbps"] == pytest.approx(0.5)


# -- wrong ---------------------------------------------------------------------------------------


def test_wrong_is_summed_over_ranks_and_minus_one_when_not_checked():
    assert build_row("allreduce", _records([1.0] * 3, [0, 2, 3]), 8, 2, "float32", "sum", "r")["wrong"] == 5
    assert build_row("allreduce", _records([1.0] * 3, [-1] * 3), 8, 2, "float32", "sum", "r")["wrong"] == -1


def test_count_wrong():
    want = np.arange(10.0)
    got = want.copy()
    got[[2, 7]] = -1
    assert count_wrong(got, want) == 2
    assert count_wrong(want[:4], want) == 10  # a wrong length counts every expected element
    assert count_wrong(want.astype(np.float32), want) == 10  # so does a wrong dtype
    assert count_wrong(None, want) == 10
    assert count_wrong(None, None) == 0  # reduce on a rank other than the root: nothing defined, nothing held
    assert count_wrong(got, None) == 1  # ... and holding something there is one wrong result


def test_build_row_units():
    """Moved from test_baselines (the baselines' build_row is this one now)."""
    lay = layout("allreduce", 16 << 20, 4, "float32")
    (row,) = common.combine(
        "gloo", [lay], "float32", "sum", [[{"size": lay.size_bytes, "median_us": 20_000.0, "wrong": 0}]] * 4
    )
    assert row["size"] == 16 << 20 and row["count"] == 4 << 20 and row["algorithm"] == "gloo"
    assert row["algbw_gbps"] == pytest.approx((16 << 20) / 0.02 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.5)
    assert set(row) == {
        "size",
        "count",
        "dtype",
        "op",
        "algorithm",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
    }
    ag_lay = layout("allgather", 64, 2, "float32")
    (ag,) = common.combine(
        "mpi", [ag_lay], "float32", "sum", [[{"size": 64, "median_us": 1.0, "wrong": 0}]] * 2
    )
    assert ag["op"] == "none"  # as nccl-tests prints for collectives that do not reduce


# -- the bench's report and the ratio to a baseline ---------------------------------------------


def test_bench_report_table_failures_and_closing_lines():
    ranks = _node_rows({8: [1.0, 2.0], 64: [3.0, 4.0]})
    ranks[1][1]["wrong"] = 3
    report = bench_report(ranks, "allreduce", "float32", "sum", 10, 2, data={"collective": "allreduce"})
    (table,) = report.tables
    assert table.title.startswith("allreduce, 2 ranks, float32: median of 10 iterations after 2 warm-up")
    assert table.title.endswith("busbw = algbw x 2(N-1)/N") and table.columns == COLUMNS
    assert [(r["size"], r["time_us"], r["wrong"]) for r in table.rows] == [(8, 2.0, 0), (64, 4.0, 3)]
    assert not report.ok and report.failures == ["3 wrong elements: allreduce ring size 64"]
    assert report.notes[0] == "wrong values: 3 FAILED" and report.data == {"collective": "allreduce"}
    unchecked = [[dict(rec, wrong=-1) for rec in recs] for recs in _node_rows({8: [1.0, 1.0]})]
    assert (
        bench_report(unchecked, "allreduce", "float32", "sum", 1, 0).notes[0] == "wrong values: not checked"
    )


def test_bench_report_in_place_failure_and_columns():
    ranks = [
        [dict(rec, ip_median_us=1.0, ip_wrong=r) for rec in recs]
        for r, recs in enumerate(_node_rows({8: [1.0, 1.0]}))
    ]
    report = bench_report(ranks, "allreduce", "float32", "sum", 1, 0)
    assert report.tables[0].columns == {**COLUMNS, **IN_PLACE_COLUMNS}
    assert report.failures == ["1 wrong elements: allreduce ring in place size 8"]


@pytest.mark.parametrize(
    "ours_us, theirs_us, ratio", [(0.004, 0.004, 1.0), (3.14159, 6.28318, 2.0), (1234.5678, 617.2839, 0.5)]
)
def test_ratio_to_a_baseline_compares_rows_of_one_builder(ours_us, theirs_us, ratio):
    """Our rows (as bench's summary builds them) and a baseline's (as run_baseline builds them) from
    the same per-rank medians are the same numbers, so the ratio is of like with like."""
    ours = (
        bench_report(_node_rows({64: [ours_us / 2, ours_us]}), "allreduce", "float32", "sum", 1, 0)
        .tables[0]
        .rows
    )
    lays = layouts("allreduce", [64], 2, "float32")
    per_rank = [[{"size": 64, "median_us": t, "wrong": 0}] for t in (theirs_us, theirs_us / 3)]
    (gloo,) = common.combine("gloo", lays, "float32", "sum", per_rank)
    (row,) = compare(ours, [gloo])
    assert row["x_gloo"] == ratio
    assert row["ours_us"] == ours_us and row["gloo_us"] == theirs_us
    assert row["ours_busbw"] / row["gloo_busbw"] == pytest.approx(ratio, rel=1e-12)
    same = bench_report(_node_rows({64: [theirs_us, theirs_us / 3]}), "allreduce", "float32", "sum", 1, 0)
    assert {k: v for k, v in same.tables[0].rows[0].items() if k != "algorithm"} == {
        k: v for k, v in gloo.items() if k != "algorithm"
    }


def test_the_comparison_sets_each_form_against_the_same_form_only():
    """Ours: out of place ring 10 us (rd 12), in place rd 5 us (ring 6); MPICH 20 us out of place and
    8 in place; Gloo (torch's all_reduce) in place only, 40 us. Each ratio is of one form: a pairing
    across forms would give 0.8 (MPICH in place over ours out of place) or 4.0."""
    ours = [
        build_row(
            "allreduce", _records([10.0], ip_median_us=6.0, ip_wrong=0), 64, 16, "float32", "sum", "ring"
        ),
        build_row(
            "allreduce", _records([12.0], ip_median_us=5.0, ip_wrong=0), 64, 16, "float32", "sum", "rd"
        ),
    ]
    lays = layouts("allreduce", [64], 1, "float32")
    (mpi,) = common.combine(
        "mpi", lays, "float32", "sum", [[{"size": 64, **_records([20.0], ip_median_us=8.0, ip_wrong=0)[0]}]]
    )
    (gloo,) = common.combine(
        "gloo", lays, "float32", "sum", [[{"size": 64, "ip_median_us": 40.0, "ip_wrong": 0}]]
    )
    assert gloo["time_us"] is None and gloo["wrong"] is None and gloo["ip_time_us"] == 40.0
    oop, ip = compare(ours, [mpi, gloo])
    assert (oop["form"], oop["ours"], oop["ours_us"]) == ("out of place", "ring", 10.0)
    assert (oop["mpi_us"], oop["x_mpi"]) == (20.0, 2.0)
    assert (oop["gloo_us"], oop["x_gloo"]) == (None, None)  # torch offers no out-of-place all_reduce
    assert (ip["form"], ip["ours"], ip["ours_us"]) == ("in place", "rd", 5.0)
    assert (ip["x_mpi"], ip["x_gloo"]) == (1.6, 8.0)
    table = baseline_table("allreduce", 1, [mpi, gloo], None)
    assert table.columns == {**COLUMNS, **IN_PLACE_COLUMNS}
    assert format_cell(table.rows[1]["time_us"]) == "-"


def test_a_form_a_baseline_does_not_offer_counts_no_wrong_and_fails_nothing():
    lays = layouts("allreduce", [64], 2, "float32")
    rows = common.combine(
        "gloo", lays, "float32", "sum", [[{"size": 64, "ip_median_us": 4.0, "ip_wrong": 0}]] * 2
    )
    assert closing_lines(rows)[0] == "wrong values: 0 OK"
    bad = common.combine(
        "gloo", lays, "float32", "sum", [[{"size": 64, "ip_median_us": 4.0, "ip_wrong": 2}]] * 2
    )
    assert closing_lines(bad)[0] == "wrong values: 4 FAILED"


# -- the model beside every row ------------------------------------------------------------------

IB_SOURCE = ModelSource(PRESETS["ib"], "preset", "ib")


def test_model_columns_use_the_formula_of_the_row():
    ib = PRESETS["ib"]
    ranks = _node_rows({8: [1.0] * 4, 1 << 20: [3000.0] * 4}, nranks=4)
    report = bench_report(ranks, "allreduce", "float32", "sum", 1, 0, model=IB_SOURCE)
    small, large = report.tables[0].rows
    # 1 MiB on 4 ranks: 6 (5 us + 262144 B / 50 GB/s) = 6 x 10.24288 us
    assert large["model_us"] == pytest.approx(6 * (5 + 262144 / 50e3))
    assert large["vs_model"] == pytest.approx(3000.0 / large["model_us"])
    assert small["model_us"] == pytest.approx(1e6 * collective_time_s("allreduce", "ring", 8, 4, ib))
    assert (small["model_pick"], large["model_pick"]) == ("rd", "hd")
    assert list(large)[: len(COLUMNS)] == list(COLUMNS)  # the measured columns are unchanged


def test_auto_rows_are_modelled_with_what_auto_ran_and_show_the_models_pick():
    ranks = _node_rows({1 << 20: [1000.0, 1000.0]}, algorithm="auto->tree")
    (row,) = bench_report(ranks, "allreduce", "float32", "sum", 1, 0, model=IB_SOURCE).tables[0].rows
    assert row["model_us"] == pytest.approx(
        1e6 * collective_time_s("allreduce", "tree", 1 << 20, 2, PRESETS["ib"])
    )
    # N = 2: rd sends all of S once (5 us + S/beta), the ring and hd half of it twice (10 us + S/beta)
    assert row["algorithm"] == "auto->tree" and row["model_pick"] == "rd"


@pytest.mark.parametrize(
    "collective, algorithm", [("allgather", "ring"), ("reduce_scatter", "ring"), ("broadcast", "tree")]
)
def test_other_collectives_get_their_own_formula_and_no_pick(collective, algorithm):
    ranks = _node_rows({4096: [50.0] * 3}, algorithm=algorithm, nranks=3)
    report = bench_report(ranks, collective, "float32", "sum", 1, 0, model=IB_SOURCE)
    (row,) = report.tables[0].rows
    assert row["model_us"] == pytest.approx(
        1e6 * collective_time_s(collective, algorithm, 4096, 3, PRESETS["ib"])
    )
    assert "model_pick" not in row and "model_pick" not in report.tables[0].columns


def test_the_caption_names_the_model_and_result_json_keeps_it():
    report = bench_report(_node_rows({8: [1.0, 1.0]}), "allreduce", "float32", "sum", 1, 0, model=IB_SOURCE)
    (table,) = report.tables
    first, caption = table.title.split("\n")
    assert first.endswith("busbw = algbw x 2(N-1)/N")
    assert caption == "model: preset ib (alpha 5 us, beta 50 GB/s)"
    assert list(table.columns) == [
        *list(COLUMNS)[:5],
        "model_pick",
        *list(COLUMNS)[5:],
        "model_us",
        "vs_model",
    ]
    assert report.data["model"]["caption"] == caption and report.data["model"]["gamma_bytes_per_s"] is None
    json.dumps(report.data["model"], allow_nan=False)


def test_one_rank_has_no_ratio():
    (row,) = add_model_columns(
        [build_row("allreduce", _records([4.0]), 64, 16, "float32", "sum", "ring")],
        "allreduce",
        1,
        PRESETS["ib"],
    )
    assert row["model_us"] == 0.0 and row["vs_model"] is None and format_cell(row["vs_model"]) == "-"


def test_baseline_rows_are_modelled_with_the_models_pick():
    lays = layouts("allreduce", [8, 64 << 20], 8, "float32")
    per_rank = [[{"size": s, "median_us": 100.0, "wrong": 0} for s in (8, 64 << 20)]] * 8
    rows = common.combine("gloo", lays, "float32", "sum", per_rank)
    assert baseline_table("allreduce", 8, rows, None).columns == COLUMNS
    table = baseline_table("allreduce", 8, rows, IB_SOURCE.to_dict())
    small, large = table.rows
    assert (small["model_pick"], large["model_pick"]) == ("rd", "hd")
    assert small["model_us"] == pytest.approx(1e6 * collective_time_s("allreduce", "rd", 8, 8, PRESETS["ib"]))
    assert "model: preset ib" in table.title and "vs_model" in table.columns
