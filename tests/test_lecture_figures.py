"""The lecture's plan (lecture.yaml) and the pure parts of comparing its figures with a run."""

import os
from pathlib import Path

import calibrations
import pytest

from playground.config.scenario import builtin_names
from playground.core.errors import ScenarioError
from playground.lecture.figures import (
    Context,
    NotMeasured,
    Reading,
    Run,
    decimals_of,
    evaluate,
    fill,
    format_value,
    matches,
)
from playground.lecture.plan import Figure, Section, load_plan
from playground.lecture.readers import READERS
from playground.lecture.readers.concurrency import GOODPUT
from playground.models import recovery as recovery_model

SEED = Path(  # the lecture this project comes from, shipped in the package (docs/ links to it)
    os.environ.get(
        "PLAYGROUND_LECTURE_TEXT",
        Path(__file__).resolve().parents[1]
        / "playground"
        / "transformer"
        / "lecture-p4-computer-systems.txt",
    )
)


@pytest.fixture(scope="module")
def plan():
    return load_plan(readers=READERS)


def test_plan_follows_the_lecture_and_every_figure_has_a_reader(plan):
    assert [s.id for s in plan.sections] == ["memory", "queueing", "concurrency", "paging", "networking"]
    ids = [f.id for s in plan.sections for f in s.figures]
    assert sorted(ids) == sorted(READERS), "a reader without a figure, or a figure without a reader"
    for s in plan.sections:
        assert s.figures and s.scenarios
        for run in s.scenarios:
            assert run.name in builtin_names()
            assert run.expected_s.quick <= run.expected_s.full


def test_plan_has_the_exact_figures_the_issue_names(plan):
    exact = {f.id: f.lecture for s in plan.sections for f in s.figures if f.kind == "exact"}
    assert exact["interleavings"] == [924, 702, 216, 6]
    assert exact["cow-prefix"][:2] == [28, 10]
    assert exact["ex10"][:2] == [600, 166]
    assert exact["ex8"] == "0x134123"
    assert exact["bubbles"] == [75, 42.9, 15.8, 1.2]
    assert exact["batching-capacity"] == [48, 615]


def test_quotes_are_the_lectures_words():
    """Each figure cites the lecture verbatim ("……" marks a cut), so a reader can find it there."""
    text = SEED.read_text()
    for s in load_plan().sections:
        for f in s.figures:
            pos = 0
            for part in f.quote.split("……"):
                found = text.find(part, pos)
                assert found >= 0, f"{f.id}: {part!r} is not in the lecture"
                pos = found + len(part)


def test_a_bad_plan_is_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text(
        "sections:\n  - number: 1\n    id: x\n    title: X\n    where: here\n    intro: i\n    scenarioz: []\n"
    )
    with pytest.raises(ScenarioError, match=r"key 'sections\[0\]\.scenarioz': unknown key"):
        load_plan(bad)
    good_shape = (
        "sections:\n  - number: 1\n    id: x\n    title: X\n    where: here\n    intro: i\n"
        "    scenarios: []\n    figures:\n      - {id: nobody-reads-me, where: s, what: w, kind: exact, lecture: 1}\n"
    )
    bad.write_text(good_shape)
    with pytest.raises(ScenarioError, match="nobody-reads-me.*no reader"):
        load_plan(bad, readers=READERS)
    bad.write_text(good_shape.replace("kind: exact, lecture: 1", "kind: timed, lecture: 1"))
    with pytest.raises(ScenarioError, match="why"):
        load_plan(bad)


@pytest.mark.parametrize(
    "lecture, value, ok",
    [
        (42.9, 42.857142857142854, True),
        (15.8, 15.789473684210526, True),
        (1.2, 1.1583011583011582, True),
        (48, 47.61904761904761, True),
        (615, 615.3846153846154, True),
        (75, 77.1, False),
        ([924, 702, 216, 6], [924, 702, 216, 6], True),
        ([924, 702, 216, 6], [924, 702, 217, 5], False),
        ([28, 10], [28], False),
        ("0x134123", "0X134123", True),
        ("0x134123", "0x134124", False),
        (0, 0, True),
        (0, None, False),
        ("> 0", 245393, True),  # a bound: the lecture says only that some update is lost
        ("> 0", 0, False),
        ("> 0", None, False),
        ("> 0", True, False),
        (">= 2", 2, True),
        ("< 1.5", 1.49, True),
        ("< 1.5", 1.5, False),
    ],
)
def test_matches_to_the_precision_the_lecture_gave(lecture, value, ok):
    assert matches(lecture, value) is ok


def test_decimals_and_formatting():
    assert [decimals_of(x) for x in (75, 42.9, 3.0, 0.75)] == [0, 1, 0, 2]
    assert format_value([75, 42.9], "%", as_given=True) == "75 / 42.9 %"
    assert format_value(470588.2, "bytes") == "459.6 KiB"
    assert format_value(None, "ns") == "-"
    assert format_value("a few ns", "ns") == "a few ns"
    assert fill("{a:.1f} and {missing}", {"a": 1.25}) == "1.2 and {missing}"


def _section(*figures):
    return Section(1, "s", "S", "§0", "intro", (), tuple(figures))


def _ctx(result: dict | None, ok: bool = True) -> Context:
    run = Run("race", result, {}, None, ok)
    return Context({"race": run}, {}, {"cores": 2})


EXACT = Figure("interleavings", "§3.4", "orders", "exact", lecture=[924, 702, 216, 6])
RESULT = {
    "ok": True,
    "interleavings": [
        {"case": "2 threads x 2 increment(s)", "orders": 924, "final_values": "x=2: 702, x=3: 216, x=4: 6"}
    ],
}


def test_an_exact_figure_is_read_from_the_result_not_from_the_lecture():
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], _ctx(RESULT))
    assert (row.status, row.measured, row.model) == ("matched", [924, 702, 216, 6], 924)
    wrong = {
        **RESULT,
        "interleavings": [{**RESULT["interleavings"][0], "final_values": "x=2: 701, x=3: 217, x=4: 6"}],
    }
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], _ctx(wrong))
    assert row.status == "not matched" and row.failed and row.measured == [924, 701, 217, 6]


def test_a_figure_whose_scenario_failed_or_changed_says_so():
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], _ctx(RESULT, ok=False))
    assert row.status == "not measured" and row.failed and "race failed" in row.error
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], Context({}, {}, {}))
    assert "was not run" in row.error
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], _ctx({"ok": True}))
    assert row.status == "not measured" and "could not read: KeyError" in row.error


def test_a_timed_figure_fills_its_sentence_from_the_reader_and_the_machine():
    fig = Figure("t", "§9", "what", "timed", unit="x", lecture=2, why="{cores} cores, {v:.1f}")
    row = evaluate(_section(fig), fig, lambda ctx: Reading(1.5, 2.0, values={"v": 0.25}), _ctx(RESULT))
    assert (row.status, row.why, row.failed) == ("measured", "2 cores, 0.2", False)
    assert row.cells()["this machine"] == "1.50 x"

    def missing(ctx):
        raise NotMeasured("nothing here")

    assert evaluate(_section(fig), fig, missing, _ctx(RESULT)).error == "not measured: nothing here"


def test_a_timed_figure_may_say_how_far_it_is_from_the_lectures():
    fig = Figure("t", "§9", "what", "timed", unit="us", lecture=0.7, why="{x_lecture:.0f}x the lecture's")
    row = evaluate(_section(fig), fig, lambda ctx: Reading(113.4), _ctx(RESULT))
    assert row.why == "162x the lecture's"
    words = Figure("w", "§9", "what", "timed", lecture="a few ns", why="{x_lecture}")
    assert evaluate(_section(words), words, lambda ctx: Reading(3.0), _ctx(RESULT)).why == "{x_lecture}"


def _pingpong(us_at_64: float) -> Run:
    rows = [{"size": n, "ours_us": us_at_64 + n / 2000.0} for n in (64, 4096, 65536, 1 << 20)]
    return Run("pingpong", {"ok": True, "tables": [{"rows": rows}]}, {}, None, True)


def test_both_alphas_come_from_their_own_ping_pong_run(plan):
    ctx = Context({"pingpong": _pingpong(100.0), "pingpong-shm": _pingpong(2.0)}, {}, {"cores": 2})
    section = next(s for s in plan.sections if s.id == "networking")
    figures = {f.id: f for f in section.figures}
    zmq, shm = (evaluate(section, figures[i], READERS[i], ctx) for i in ("alpha", "alpha-shm"))
    assert zmq.measured == pytest.approx(100.0) and shm.measured == pytest.approx(2.0)
    assert zmq.why.startswith("143x the lecture's") and shm.why.startswith("3x the lecture's")
    runs = {r.key: r for r in section.scenarios}
    assert runs["pingpong-shm"].name == "pingpong" and runs["pingpong-shm"].transport == "shm"
    assert runs["pingpong-shm"].command(quick=False) == (
        "python -m playground run pingpong --transport shm --set params.trace_messages=false"
    )


def test_the_model_column_uses_this_machines_calibration(plan, tmp_path, monkeypatch):
    """With a calibration, the small message's model is its calibrated one-way time and the ring/tree
    crossover comes from the calibrated machine; without one, the run's own ping-pong fit."""
    section = next(s for s in plan.sections if s.id == "networking")
    figures = {f.id: f for f in section.figures}
    rows = [{"algorithm": a, "size": n, "time_us": 100.0 if a == "ring" else 50.0} for a in ("ring", "tree")
            for n in (8, 65536)]  # fmt: skip
    bench = Run("bench", {"ok": True, "ranks": 8, "transport": "ipc", "rows": rows}, {}, None, True)
    pingpong = _pingpong(100.0)
    pingpong.result["transport"] = "ipc"
    ctx = Context({"pingpong": pingpong, "bench": bench}, {"link_alpha_us": 5, "link_beta_gbps": 50,
                  "num_ranks": 8}, {"cores": 2})  # fmt: skip
    plain = evaluate(section, figures["small-message"], READERS["small-message"], ctx)
    assert plain.model_note == "alpha + n / beta of this run's fit"
    monkeypatch.setenv("PLAYGROUND_CALIBRATION", str(calibrations.write(tmp_path / "c.json")))
    small = evaluate(section, figures["small-message"], READERS["small-message"], ctx)
    assert small.model == pytest.approx(1e6 * (calibrations.line_s("ipc", 64) + calibrations.copies_s(64)))
    assert small.model_note == "one way by this machine's calibration (ipc)"
    crossover = evaluate(section, figures["ring-vs-tree"], READERS["ring-vs-tree"], ctx)
    assert crossover.model_note.startswith("this machine's calibration (ipc; the simulator where ranks")
    assert crossover.model > 0


def test_a_scenario_run_twice_needs_an_id(tmp_path):
    plan = tmp_path / "plan.yaml"
    run = "      - {name: pingpong, expected_s: {full: 1, quick: 1}}\n"
    plan.write_text(
        "sections:\n  - number: 1\n    id: x\n    title: X\n    where: here\n    intro: i\n    scenarios:\n"
        + run * 2
    )
    with pytest.raises(ScenarioError, match="scenario 'pingpong' runs twice in section 1; give one an `id`"):
        load_plan(plan)
    plan.write_text(plan.read_text().replace("name: pingpong,", "name: pingpong, id: again,", 1))
    assert [r.key for r in load_plan(plan).sections[0].scenarios] == ["again", "pingpong"]


def _race(rows: list[dict]) -> Context:
    result = {"ok": True, "tables": [{"title": "race", "rows": rows}]}
    return Context({"race": Run("race", result, {"num_procs": 4, "increments": 100_000}, None, True)}, {}, {})


def test_the_race_figure_needs_lost_updates_without_a_lock(plan):
    figure = next(f for s in plan.sections for f in s.figures if f.id == "lost-update")
    section = _section(figure)
    lost = [{"variant": "no lock", "expected": 400_000, "lost": 245_393, "lost_pct": 61.3}]
    row = evaluate(section, figure, READERS["lost-update"], _race(lost))
    assert (row.status, row.measured) == ("matched", 245_393)
    assert row.model_note == "4 processes x 100,000 increments: 400,000 expected"
    none_lost = [{**lost[0], "lost": 0, "lost_pct": 0.0}]
    row = evaluate(section, figure, READERS["lost-update"], _race(none_lost))
    assert row.status == "not matched" and row.failed  # a quick page that shows no race fails


def test_the_bucket_count_is_read_from_the_buckets_run(plan):
    section = next(s for s in plan.sections if s.id == "networking")
    figure = next(f for f in section.figures if f.id == "bucket-count")
    result = {"ok": True, "rows": [{"strategy": "bucketed", "cap_mb": 25, "num_allreduces": 5}]}
    params = {"architecture": "lecture", "first_bucket_mb": 1, "scale": 0.25}
    ctx = Context({"buckets": Run("buckets", result, params, None, True)}, section.constants, {})
    row = evaluate(section, figure, READERS["bucket-count"], ctx)
    assert (row.status, row.lecture, row.measured, row.model) == ("measured", 4, 5, 4)  # 100 MB / 25 MiB
    assert "first bucket of 1 MiB" in row.why


def _drill(k: int, wall_s: float, period_s: float, stall_s: float, restarts: list[dict], mtbf_s=1.0) -> Run:
    """A train-recovery run of 100 steps under the mtbf drill, as result.json and scenario.yaml hold it."""
    result = {
        "ok": True,
        "modes": [{"mode": "bucketed", "losses": [0.0] * 100, "wall_s": wall_s, "period_s": period_s}],
        "checkpoints": [{"count": 100 // k, "bytes": 1 << 19, "stall_s": {"median": stall_s}}],
        **({"recovery": {"restarts": restarts}} if restarts else {}),
    }
    return Run("train-recovery", result, {"checkpoint_every": k}, None, True, {"mtbf_s": mtbf_s, "seed": 3})


def test_the_goodput_figure_reads_both_intervals_beside_dalys_model(plan):
    """Useful steps per second at each interval; the model takes the rarer run's step (the frequent
    one's median period holds stalls), the frequent run's stall and every restart's median."""
    section, figure = _figure(plan, "train-goodput")
    often = [{"total_s": 0.2, "steps_redone": 1}, {"total_s": 0.4, "steps_redone": 0}]
    rare = [{"total_s": 0.3, "steps_redone": 7}]
    runs = {
        "train-recovery-often": _drill(2, 2.0, period_s=0.009, stall_s=0.008, restarts=often),
        "train-recovery": _drill(20, 1.25, period_s=0.005, stall_s=0.02, restarts=rare),
    }
    row = evaluate(section, figure, READERS["train-goodput"], Context(runs, {}, {"cores": 2}))
    assert (row.status, row.error, row.measured) == ("measured", "", [50.0, 80.0])
    daly = [recovery_model.goodput(k, 0.005, 0.008, 0.3, 1.0) for k in (2, 20)]
    assert row.model == pytest.approx(daly) and daly[0] < daly[1]
    # Young/Daly: sqrt(2 x 8 ms x 1 s) - 8 ms = 118.5 ms, 23.7 steps of 5 ms
    assert row.model_note.endswith("R = 0.30 s and M = 1 s; Young/Daly's optimum sqrt(2 C M) - C = 24 steps")
    assert row.why.startswith("The drill killed a rank 2 and 1 times (1 and 7 steps redone)")
    assert "every 2 steps stand the steps still 44% of the time" in row.why  # 8 / (2 x 5 + 8)

    quiet = {k: _drill(r.params["checkpoint_every"], 1.0, 0.005, 0.008, []) for k, r in runs.items()}
    row = evaluate(section, figure, READERS["train-goodput"], Context(quiet, {}, {}))
    assert row.error == "" and row.measured == [100.0, 100.0]  # a short run the drill never struck
    assert row.why.startswith("The drill struck no rank in these short runs")
    assert row.model == pytest.approx([recovery_model.goodput(k, 0.005, 0.008, 0.0, 1.0) for k in (2, 20)])

    undrilled = {**runs, "train-recovery": _drill(20, 1.25, 0.005, 0.02, rare, mtbf_s=None)}
    row = evaluate(section, figure, READERS["train-goodput"], Context(undrilled, {}, {}))
    assert row.status == "not measured" and "without the mtbf drill" in row.error
    row = evaluate(
        section, figure, READERS["train-goodput"], Context({"train-recovery": runs["train-recovery"]})
    )
    assert row.error == "not measured: scenario train-recovery-often was not run"


def test_the_goodput_runs_differ_only_in_the_interval(plan):
    """Both runs face the same drill (mtbf, seed) on the same model, full and quick."""
    section = next(s for s in plan.sections if s.id == "concurrency")
    runs = {r.key: r for r in section.scenarios}
    for quick in (False, True):
        sets = [dict(s.split("=", 1) for s in runs[key].overrides(quick)) for key in GOODPUT]
        intervals = [int(s.pop("params.checkpoint_every")) for s in sets]
        assert sets[0] == sets[1] and intervals[0] < intervals[1]
        assert "recovery.mtbf_s" in sets[0] and "recovery.seed" in sets[0]


# -- verdicts: computed from the values on their own row -----------------------------------------


def _figure(plan, figure_id: str):
    return next((s, f) for s in plan.sections for f in s.figures if f.id == figure_id)


FORMULA = [75.0, 42.857142857142854, 15.789473684210526, 1.1583011583011582]  # (p-1)/(m+p-1), p = 4


def test_a_checked_model_beside_a_measurement_outside_its_band_says_so(plan):
    """The bubbles of 4 equal stages: the formula matches the lecture, the measured pipeline's
    bubbles at 4, 16 and 256 micro-batches are well over it, and the row says so with its values."""
    section, figure = _figure(plan, "bubbles")
    measured = [76.11, 54.63, 20.30, 4.65]
    row = evaluate(
        section, figure, lambda ctx: Reading(measured, FORMULA, values={"extra_ms": 0.41}), _ctx(None)
    )
    assert (row.status, row.outside, row.failed) == ("matched", True, False)
    assert row.verdict == (
        "matched (the model); this machine outside 25% of it at 3 of 4: 54.63 vs 42.86, 20.30 vs 15.79, "
        "4.65 vs 1.16 %"
    )
    close = [76.11, 45.0, 17.0, 1.3]
    row = evaluate(section, figure, lambda ctx: Reading(close, FORMULA, values={"extra_ms": 0.1}), _ctx(None))
    assert (row.status, row.outside) == ("matched", False)
    assert row.verdict == "matched (the model); this machine within 25% of it"
    wrong = [76.0, *FORMULA[1:]]
    row = evaluate(section, figure, lambda ctx: Reading(measured, wrong), _ctx(None))
    assert row.status == "not matched" and row.failed and row.verdict.startswith("not matched (the model)")


def test_the_pipeline_schedules_row_shows_no_measurement_as_its_own(plan):
    """The schedule in simulated time is the model; the stage processes' measured bubble belongs to
    the next row, not beside the schedule's "matched"."""
    runs = [
        {"schedule": "1f1b", "m": m, "bubble_pct": b, "ideal_pct": i, "model_pct": b}
        for m, b, i in zip((1, 4, 16), (76.11, 54.63, 62.08), FORMULA, strict=False)
    ]
    result = {
        "ok": True,
        "grid": {"pipeline": 4},
        "runs": runs,
        "cores": 2,
        "stage_compute_ms": {"16": [1, 2]},
    }
    ctx = Context({"train-pipeline": Run("train-pipeline", result, {}, None, True)}, {}, {})
    section, figure = _figure(plan, "pp-bubble")
    row = evaluate(section, figure, READERS["pp-bubble"], ctx)
    assert (row.status, row.verdict, row.measured) == ("matched", "matched (the model)", None)
    assert row.cells()["this machine"].startswith("not a measurement")
    section, figure = _figure(plan, "pp-bubble-measured")
    row = evaluate(section, figure, READERS["pp-bubble-measured"], ctx)
    assert (row.status, row.measured, row.verdict) == ("measured", [76.11, 54.63, 62.08], "")


def test_a_checked_measurement_beside_a_different_model_says_so():
    row = evaluate(_section(EXACT), EXACT, lambda ctx: Reading([924, 702, 216, 6], 925), _ctx(RESULT))
    assert row.status == "matched" and row.outside
    assert row.verdict == "matched; the model differs: 925 where this machine has 924"
    row = evaluate(_section(EXACT), EXACT, READERS["interleavings"], _ctx(RESULT))
    assert (row.verdict, row.outside) == ("matched", False)
