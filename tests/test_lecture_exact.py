"""Every exact figure of the lecture, checked against real runs of the scenarios it comes from.

The scenarios run through the real CLI with the lecture's --quick overrides; each exact figure's
row is then built from their result.json files, as the page builds it, and must match the lecture.
"""

from pathlib import Path

import pytest
from verdicts import check_summary

from playground.cli.testing import run_scenario
from playground.lecture.figures import Context, NotMeasured, Run, evaluate
from playground.lecture.page import Page, SectionBlock, build_markdown
from playground.lecture.plan import load_plan
from playground.lecture.readers import READERS

PLAN = load_plan(readers=READERS)
EXACT = [(s, f) for s in PLAN.sections for f in s.figures if f.kind == "exact"]
QUICK_SETS = {run.name: run.quick for s in PLAN.sections for run in s.scenarios}


class _Recording(Context):
    """A context that notes which scenarios a reader asks for."""

    def run(self, name: str) -> Run:
        self.asked.append(name)
        return super().run(name)


def _recording(runs, constants) -> _Recording:
    ctx = _Recording(runs, constants, {"cores": 2, "line": 64, "page_bytes": 4096})
    object.__setattr__(ctx, "asked", [])
    return ctx


def _scenarios_of(section, figure) -> list[str]:
    ctx = _recording({}, section.constants)
    with pytest.raises(NotMeasured):
        READERS[figure.id](ctx)
    return ctx.asked


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    names = sorted({name for s, f in EXACT for name in _scenarios_of(s, f)})
    out = {}
    for name in names:
        base = tmp_path_factory.mktemp(name)
        code, result, stdout, stderr = run_scenario(name, base, sets=list(QUICK_SETS[name]), timeout_s=90)
        assert code == 0, f"{name} failed:\n{stdout}\n{stderr}"
        out[name] = Run.from_dir(name, Path(result["run_dir"]))
    return out


def test_every_exact_figure_comes_from_a_scenario():
    assert len(EXACT) >= 10
    for section, figure in EXACT:
        assert _scenarios_of(section, figure), f"{figure.id} reads no scenario's result"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("section, figure", EXACT, ids=[f.id for _, f in EXACT])
def test_exact_figure_matches_the_lecture(runs, section, figure):
    ctx = _recording(runs, section.constants)
    row = evaluate(section, figure, READERS[figure.id], ctx)
    assert ctx.asked, "the value must come from a run's result"
    assert row.error == ""
    checked = row.model if figure.check == "model" else row.measured
    assert row.status == "matched", f"{figure.id}: lecture {row.lecture}, this run {checked}"


@pytest.mark.slow
def test_the_rows_hold_what_the_results_hold(runs):
    by_id = {f.id: (s, f) for s, f in EXACT}
    section, figure = by_id["interleavings"]
    row = evaluate(section, figure, READERS["interleavings"], Context(runs, {}, {}))
    case = next(c for c in runs["race"].result["interleavings"] if c["orders"] == row.measured[0])
    assert case["final_values"] == "x=2: {}, x=3: {}, x=4: {}".format(*row.measured[1:])
    section, figure = by_id["ex10"]
    row = evaluate(section, figure, READERS["ex10"], Context(runs, {}, {}))
    fork = next(
        r for r in runs["kvcache-ex10"].result["rows"] if r["policy"] == "paged" and r["mode"] == "fork"
    )
    assert row.measured[1:] == [fork["pages"], fork["cow_copies"], fork["shared_blocks"]]


@pytest.mark.slow
def test_every_verdict_agrees_with_the_values_on_its_row(runs, tmp_path):
    """Read back from summary.md's own cells (tests/verdicts.py): a "matched" row's checked values
    are the lecture's, and the values beside them are within the band or the row says outside."""
    blocks = [
        SectionBlock(
            s, [evaluate(s, f, READERS[f.id], Context(runs, s.constants, {})) for f in s.figures], []
        )
        for s in PLAN.sections
    ]
    md = build_markdown(Page("quick", 0.0, 1.0, {}, blocks), tmp_path)
    assert check_summary(md) == len(EXACT)
