"""The page builder on synthetic results: sections, tables, images, failures, escaping, summary.md."""

import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from playground.lecture.figures import FigureRow  # noqa: E402
from playground.lecture.page import Page, ScenarioBlock, SectionBlock, build_html, build_markdown  # noqa: E402
from playground.lecture.plan import Expected, Figure, ScenarioRun, Section  # noqa: E402
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
