"""The page builder on synthetic results: sections, tables, images, failures, escaping, summary.md."""

import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
import pytest
import verdicts
from verdicts import check_row, check_summary

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from playground.lecture.figures import Context, FigureRow, Reading, evaluate  # noqa: E402
from playground.lecture.page import Page, ScenarioBlock, SectionBlock, build_html, build_markdown  # noqa: E402
from playground.lecture.plan import Expected, Figure, ScenarioRun, Section, load_plan  # noqa: E402
from playground.lecture.readers import READERS  # noqa: E402
from playground.lecture.runner import Outcome  # noqa: E402


def _png(path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [1, 0])
    fig.savefig(path)
    plt.close(fig)
    return path


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self.imgs, self.sections = [], 0, [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "script" or (
            tag in ("link", "img") and re.match(r"https?:", a.get("src") or a.get("href") or "")
        ):
            self.scripts += 1
        if tag == "img":
            self.imgs.append(a["src"])
        if tag == "section":
            self.sections.append(a["id"])


def _page(tmp_path: Path) -> Page:
    ok_run = ScenarioRun("race", Expected(1, 1), quick=("params.increments=100",))
    bad_run = ScenarioRun("cache", Expected(1, 1))
    ok = Outcome(1, ok_run, ok_run.command(True), 0, 0.5, tmp_path / "race-dir")
    bad = Outcome(
        2, bad_run, bad_run.command(True), 1, 0.2, None, tmp_path / "cache.txt", "rank 0 raised <Boom>"
    )
    result = {
        "ok": True,
        "tables": [
            {
                "title": "lost updates",
                "rows": [{"variant": "no lock", "lost": 12, "pct": 0.5}],
                "columns": None,
            },
            {"title": "named", "rows": [{"k": "<b>x</b>"}], "columns": {"k": "Key header"}},
        ],
        "notes": ["a note & more"],
    }
    exact = Figure(
        "interleavings", "§3.4", "orders", "exact", lecture=[924, 702, 216, 6], quote="共 924 种交错"
    )
    timed = Figure("t", "§1.4", "L1 latency", "timed", unit="ns", lecture=1, why="why <it> differs")
    sec1 = Section(1, "one", "First", "§1", "intro one", (ok_run,), (exact,))
    sec2 = Section(2, "two", "Second", "§2", "intro two", (bad_run,), (timed,))
    rows1 = [FigureRow(1, exact, [924, 702, 216, 6], [924, 702, 216, 6], 924, "matched")]
    rows2 = [FigureRow(2, timed, 1, None, None, "not measured", error="not measured: scenario cache failed")]
    img = _png(tmp_path / "plot.png")
    return Page(
        "quick",
        0.0,
        12.0,
        {"CPU": "Test CPU", "cores": "2"},
        [
            SectionBlock(sec1, rows1, [ScenarioBlock(ok, "the race", result, [img])]),
            SectionBlock(sec2, rows2, [ScenarioBlock(bad, "the cache", None, [])]),
        ],
    )


def test_html_has_every_section_table_and_image_and_needs_nothing_else(tmp_path):
    text = build_html(_page(tmp_path))
    parsed = _Collect()
    parsed.feed(text)
    assert parsed.sections == ["s1", "s2"]
    assert parsed.scripts == 0, "the page must work without JavaScript or the network"
    assert len(parsed.imgs) == 1 and parsed.imgs[0].startswith("data:image/png;base64,")
    assert "Test CPU" in text and "1 of 2 scenarios ok (1 failed)" in text
    assert "exact figures: 1 of 1 matched" in text
    assert "<th>Key header</th>" in text and "<th>variant</th>" in text
    assert "&lt;b&gt;x&lt;/b&gt;" in text and "<b>x</b>" not in text  # values are escaped
    assert "python -m playground run race --set params.increments=100" in text


def test_a_failed_scenario_shows_its_error_and_how_to_rerun_it(tmp_path):
    text = build_html(_page(tmp_path))
    assert "FAILED" in text and "rank 0 raised &lt;Boom&gt;" in text
    assert "rerun it alone: <code>python -m playground run cache</code>" in text
    assert "not measured: scenario cache failed" in text


def test_summary_md_has_the_same_tables(tmp_path):
    md = build_markdown(_page(tmp_path), tmp_path)
    assert "## 1. First (§1)" in md and "## 2. Second (§2)" in md
    assert "| orders (§3.4) | 924 / 702 / 216 / 6 | 924 / 702 / 216 / 6 | 924 | **matched** |" in md
    assert "| variant | lost | pct |" in md and "![plot](plot.png)" in md
    assert "rank 0 raised <Boom>" in md


def test_a_diagram_is_embedded_as_svg_with_its_sentence(tmp_path):
    page = _page(tmp_path)
    svg = tmp_path / "ring-diagram.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>')
    block = page.sections[0].scenarios[0]
    sentence = "Ring all-reduce: 24 messages in 6 steps <2(N-1)>."
    blocks = [ScenarioBlock(block.outcome, block.description, block.result, [svg], {svg: sentence})]
    page.sections[0] = SectionBlock(page.sections[0].section, page.sections[0].figures, blocks)
    text = build_html(page)
    parsed = _Collect()
    parsed.feed(text)
    assert parsed.scripts == 0 and len(parsed.imgs) == 1
    assert parsed.imgs[0].startswith("data:image/svg+xml;base64,")
    assert '<figure class="diagram">' in text
    assert "<figcaption>Ring all-reduce: 24 messages in 6 steps &lt;2(N-1)&gt;.</figcaption>" in text
    md = build_markdown(page, tmp_path)
    assert "![ring-diagram](ring-diagram.svg)" in md and f"*{sentence}*" in md


def _exact_page(rows: list[FigureRow]) -> Page:
    sections = [
        SectionBlock(Section(1, "one", "First", "§1", "intro", (), tuple(r.figure for r in rows)), rows, [])
    ]
    return Page("quick", 0.0, 1.0, {}, sections)


def test_every_verdict_on_the_page_agrees_with_the_values_on_its_row(tmp_path):
    """The rows of the issue (a measured bubble over the formula, the schedule's row) and every
    other exact figure of the plan with its lecture values as this machine's: each verdict of
    summary.md, read back from its own cells (tests/verdicts.py), holds; the outside row says why."""
    plan = load_plan(readers=READERS)
    formula = [75.0, 42.857142857142854, 15.789473684210526, 1.1583011583011582]
    readings = {
        "bubbles": Reading([76.11, 54.63, 20.30, 4.65], formula, values={"extra_ms": 0.41}),
        "pp-bubble": Reading(None, formula[:3]),
        "batching-capacity": Reading([45.3, 560.0], [47.61904761904761, 615.3846153846154]),
    }
    rows = []
    for s in plan.sections:
        for f in s.figures:
            if f.kind == "exact":
                reading = readings.get(f.id) or Reading(1 if f.id == "lost-update" else f.lecture)
                rows.append(evaluate(s, f, lambda ctx, r=reading: r, Context({}, {}, {})))
    md = build_markdown(_exact_page(rows), tmp_path)
    assert check_summary(md) == len(rows) >= 10
    bubbles = next(line for line in md.splitlines() if line.startswith("| bubble of 4 equal stages"))
    assert "outside 25% of it at 3 of 4: 54.63 vs 42.86, 20.30 vs 15.79, 4.65 vs 1.16 %**" in bubbles
    assert "every hand-off costs about 0.41 ms here" in bubbles  # why, beside the values outside
    assert "not a measurement" in next(line for line in md.splitlines() if "the schedule itself" in line)
    assert 'class="outside"' in build_html(_exact_page(rows))


def test_the_verdict_check_catches_a_matched_beside_values_that_contradict_it():
    ok = "| b | 75 / 42.9 % | 76.11 / 45.00 % | 75.00 / 42.86 % | **matched (the model); this machine within 25% of it** |"
    check_row(verdicts.rows("\n".join([verdicts.HEADER, "|---|", ok]))[0])
    for bad in (
        ok.replace("76.11 / 45.00", "76.11 / 54.63"),  # within, yet 54.63 is 27% over 42.86
        ok.replace("75.00 / 42.86 % |", "75.00 / 43.86 % |"),  # matched, yet the model says 43.9
        "| b | 75 / 15.8 % | 76.11 / 62.08 % | 75.00 / 15.79 % | **matched (the model)** |",  # nothing said
        "| i | 924 / 6 | 924 / 6 | 925 | **matched** |",  # the model beside differs
    ):
        with pytest.raises(AssertionError):
            check_row(verdicts.rows("\n".join([verdicts.HEADER, "|---|", bad]))[0])
