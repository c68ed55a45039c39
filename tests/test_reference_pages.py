"""The reference pages read as the code says: help text shown literally (`PMI_*` is no emphasis,
`runs/<timestamp>` no HTML tag), a command without arguments says so instead of an empty table, and
in a real browser no code in a table cell is cut inside a word nor any table cut off at its edge."""

import argparse
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tools import chromium, importable, need, run_chromium

from playground.cli import build_parser
from playground.cli.reference import PAGES, _text, cli_reference

ROOT = Path(__file__).resolve().parents[1]


def _markdown_to_text(page: str) -> str:
    """The page as a reader sees it: rendered as the site renders Markdown, tags dropped."""
    need(importable("markdown"), "the docs toolchain is not installed (pip install '.[docs]')")
    import markdown

    rendered = markdown.markdown(page, extensions=["tables", "fenced_code"])
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", rendered)).split())


def _subcommands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, and every sub-command's (`bench allreduce`)."""
    parser = parser or build_parser()
    out = {}
    for sub in [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]:
        for name, p in sub.choices.items():
            out[name] = p
            out |= {f"{name} {n}": q for n, q in _subcommands(p).items()}
    return out


def test_help_text_reads_on_the_page_as_the_parser_has_it():
    shown = _markdown_to_text(cli_reference())
    texts = []
    for sub in _subcommands().values():
        texts.append(sub.description or "")
        texts += [a.help for a in sub._actions if a.help and not isinstance(a, argparse._HelpAction)]
    assert any("PMI_*" in t for t in texts) and any("<timestamp>" in t for t in texts)  # what is tested
    for text in texts:
        assert " ".join(text.replace("`", "").split()) in shown, text


def test_markdown_in_prose_is_escaped_and_code_spans_are_kept():
    assert (
        _text("RANK (or PMI_*, SLURM_*) in runs/<stamp>")
        == r"RANK (or PMI\_\*, SLURM\_\*) in runs/&lt;stamp&gt;"
    )
    assert _text("see `list`, or `a_*b`") == "see `list`, or `a_*b`"


def test_a_command_without_arguments_says_so_and_no_table_is_empty():
    page = cli_reference()
    section = page.split("## `list`\n", 1)[1].split("\n## ", 1)[0]
    assert "No arguments." in section and "|" not in section
    for path, make in PAGES.items():
        lines = make().splitlines()
        for i, line in enumerate(lines):
            if re.fullmatch(r"\|(---\|)+", line):  # a table's separator: a row must follow it
                assert i + 1 < len(lines) and lines[i + 1].startswith("|"), (
                    f"{path}: empty table {lines[i - 1]}"
                )


PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const seam = /[\\s_\\/.,-]/;
  const cut = [];
  for (const code of document.querySelectorAll(".md-typeset td code")) {
    let top = null, prev = "";
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node; (node = walker.nextNode()); ) {
      for (let i = 0; i < node.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = range.getBoundingClientRect();
        if (!rect.width) { prev = node.data[i]; continue; }  // a space where the line breaks
        if (top !== null && rect.top > top + rect.height / 2 && !seam.test(prev)) cut.push(code.textContent);
        top = rect.top;
        prev = node.data[i];
      }
    }
  }
  const clipped = [...document.querySelectorAll(".md-typeset table")]
    .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 1)
    .map(t => t.querySelector("th").parentElement.textContent.trim());
  const out = document.createElement("pre");
  out.id = "probe-report";
  out.textContent = JSON.stringify({tables: document.querySelectorAll(".md-typeset table").length, cut, clipped});
  document.body.appendChild(out);
}, 0));
</script>"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_code_in_the_reference_tables_wraps_at_its_seams_and_no_table_is_cut_off(tmp_path):
    """At 1280 px, both sidebars shown (the narrowest desktop content), every code in a table cell
    breaks only after a space, `_`, `/`, `.`, `,` or `-`, and every table fits its column."""
    exe = chromium()
    need(importable("mkdocs"), "the docs toolchain is not installed (pip install '.[docs]')")
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert build.returncode == 0, build.stderr
    for path in PAGES:
        page = site / path.removesuffix(".md") / "index.html"
        probed = page.with_name("probed.html")  # beside it: the page's relative links still resolve
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        dom = run_chromium(
            exe,
            tmp_path / "profile",
            "--window-size=1280,900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probed.as_uri(),
        )
        assert dom.returncode == 0, dom.stderr[-2000:]
        found = re.search(r'<pre id="probe-report">(.*?)</pre>', dom.stdout, re.S)
        assert found, f"{path}: the page did not finish loading"
        report = json.loads(html.unescape(found.group(1)))
        assert report["tables"] > 0, path
        assert report["cut"] == [], f"{path}: code cut inside a word: {report['cut']}"
        assert report["clipped"] == [], f"{path}: tables wider than the page: {report['clipped']}"
