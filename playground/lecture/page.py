"""The lecture page: index.html (one self-contained file, images embedded) and summary.md.

Plain HTML and CSS, no JavaScript and nothing fetched from the network, so it opens anywhere and
two pages from two machines can be set side by side. summary.md has the same tables, with the
images linked from the run directories beside it.
"""

import html
import time
from dataclasses import dataclass, field
from pathlib import Path

from playground.display.report import data_uri, format_cell, html_table, table_columns
from playground.lecture.figures import FigureRow
from playground.lecture.plan import Section
from playground.lecture.runner import Outcome

TITLE = "P4 · A crash course on computer systems, measured"
FIGURE_COLUMNS = ("figure", "lecture", "this machine", "model")


@dataclass(frozen=True)
class ScenarioBlock:
    outcome: Outcome
    description: str
    result: dict | None
    images: list[Path] = field(default_factory=list)
    captions: dict[Path, str] = field(default_factory=dict)  # an image's sentence; else its file name


@dataclass(frozen=True)
class SectionBlock:
    section: Section
    figures: list[FigureRow]
    scenarios: list[ScenarioBlock]


@dataclass(frozen=True)
class Page:
    mode: str  # quick | full
    started: float  # time.time()
    elapsed_s: float
    machine: dict[str, str]
    sections: list[SectionBlock]
    interrupted: bool = False

    @property
    def outcomes(self) -> list[Outcome]:
        return [b.outcome for s in self.sections for b in s.scenarios]

    @property
    def exact(self) -> list[FigureRow]:
        return [f for s in self.sections for f in s.figures if f.figure.kind == "exact"]

    def headline(self) -> str:
        ok = sum(o.ok for o in self.outcomes)
        failed = [o for o in self.outcomes if o.failed]
        matched = sum(f.status == "matched" for f in self.exact)
        parts = [
            f"{self.mode} run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(self.started))}",
            f"{self.elapsed_s:.0f} s",
            f"{ok} of {len(self.outcomes)} scenarios ok" + (f" ({len(failed)} failed)" if failed else ""),
            f"exact figures: {matched} of {len(self.exact)} matched"
            if self.exact
            else "no exact figures here",
        ]
        if self.interrupted:
            parts.append("interrupted: the rest did not run")
        return " · ".join(parts)


# -- HTML ----------------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1.2em 3em;
       color: #1d1d1f; }
h1 { margin: .8em 0 .2em; } h2 { margin-top: 2em; border-bottom: 2px solid #ddd; padding-bottom: .2em; }
h3 { margin: 1.6em 0 .4em; } .meta { color: #555; margin: 0 0 1em; }
table { border-collapse: collapse; margin: .4em 0 .8em; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: .2em 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.wide { overflow-x: auto; } .figures td:nth-child(5) { max-width: 28em; }
.matched { color: #0a7a2f; font-weight: 600; } .outside { color: #8a5a00; } .failed, .error { color: #b00020; font-weight: 600; }
.measured { color: #555; } pre { background: #f6f6f8; padding: .5em .8em; overflow-x: auto; }
pre.error { color: #b00020; background: #fff3f3; font-weight: normal; }
figure { margin: .6em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.diagram { display: inline-block; vertical-align: top; width: 49%; margin-right: 1%; }
figure.diagram img { width: 100%; height: auto; }
figcaption, .notes, .legend, details { color: #555; font-size: 13px; }
nav a { margin-right: 1em; } .scenario { border-left: 3px solid #e4e4ea; padding-left: 1em; }
"""


def _esc(value) -> str:
    return html.escape(str(value))


def exact_cell(row: FigureRow) -> tuple[str, str]:
    """An exact row's last cell: its verdict, and why when the column beside the checked one is
    outside its band."""
    if row.error:
        return row.status, ""
    return row.verdict or row.status, row.why if row.outside else ""


def _html_figures(rows: list[FigureRow]) -> str:
    if not rows:
        return ""
    out = ['<div class="wide"><table class="figures"><tr>']
    out += [f"<th>{_esc(c)}</th>" for c in FIGURE_COLUMNS] + [
        "<th>matched, or where they differ and why</th></tr>"
    ]
    for r in rows:
        cells = r.cells()
        quote = (
            f'<details><summary>lecture text</summary><span lang="zh">{_esc(r.figure.quote)}</span></details>'
            if r.figure.quote
            else ""
        )
        out.append(f"<tr><td>{_esc(cells['figure'])}{quote}</td>")
        out += [f"<td>{_esc(cells[c])}</td>" for c in FIGURE_COLUMNS[1:]]
        if r.figure.kind == "exact":
            css = "failed" if r.status != "matched" else "outside" if r.outside else "matched"
            verdict, why = exact_cell(r)
            out.append(f'<td class="{css}">{_esc(verdict)}{_esc(". " + why) if why else ""}</td>')
        elif r.error:
            out.append(f'<td class="failed">{_esc(r.status)}</td>')
        else:
            out.append(f'<td class="measured">{_esc(r.why)}</td>')
        out.append("</tr>")
    out.append("</table></div>")
    return "".join(out)


def _html_scenario(block: ScenarioBlock, anchor: str) -> str:
    o = block.outcome
    if o.exit_code is None or o.interrupted:
        state = f'<span class="measured">{"not run" if o.exit_code is None else "interrupted"}</span>'
    elif o.ok:
        state = f'<span class="matched">ok</span> {o.elapsed_s:.1f} s'
    else:
        state = f'<span class="failed">FAILED</span> {o.elapsed_s:.1f} s'
    out = [f'<article class="scenario" id="{anchor}"><h3>{_esc(o.run.key)} · {state}</h3>']
    out.append(f"<p>{_esc(block.description)}</p><pre><code>{_esc(o.command)}</code></pre>")
    if o.failed:
        out.append(f'<pre class="error">{_esc(o.error)}</pre>')
        out.append(f"<p>rerun it alone: <code>{_esc(o.command)}</code>; its output: {_esc(o.log)}</p>")
    for img in block.images:
        css = ' class="diagram"' if img.suffix.lower() == ".svg" else ""  # diagrams side by side
        out.append(f'<figure{css}><img src="{data_uri(img)}" alt="{_esc(img.stem)}">')
        out.append(f"<figcaption>{_esc(block.captions.get(img) or img.name)}</figcaption></figure>")
    if block.result:
        out += [html_table(t) for t in block.result.get("tables") or [] if t.get("rows")]
        notes = block.result.get("notes") or []
        if notes:
            out.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    if o.run_dir:
        out.append(f'<p class="notes">run directory: {_esc(o.run_dir)}</p>')
    out.append("</article>")
    return "".join(out)


def build_html(page: Page) -> str:
    out = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(TITLE)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{_esc(TITLE)}</h1><p class='meta'>{_esc(page.headline())}</p>",
        '<table class="machine">',
    ]
    out += [f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in page.machine.items()]
    out.append("</table><nav>")
    out += [f'<a href="#s{b.section.number}">{_esc(b.section.heading)}</a>' for b in page.sections]
    out.append("</nav></header>")
    for b in page.sections:
        s = b.section
        out.append(f'<section id="s{s.number}"><h2>{_esc(s.heading)}</h2><p>{_esc(s.intro)}</p>')
        if b.figures:
            out.append("<h3>The lecture | this machine | the model</h3>" + _html_figures(b.figures))
        out += [_html_scenario(sb, f"s{s.number}-{sb.outcome.run.key}") for sb in b.scenarios]
        out.append("</section>")
    out.append("</body></html>\n")
    return "".join(out)


# -- Markdown ------------------------------------------------------------------------------------


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def build_markdown(page: Page, base: Path) -> str:
    """summary.md; image links are relative to `base`, the directory it is written to."""
    out = [f"# {TITLE}", "", page.headline(), ""]
    out += _md_table(["machine", ""], [[k, v] for k, v in page.machine.items()])
    for b in page.sections:
        out += [f"## {b.section.heading}", "", b.section.intro, ""]
        if b.figures:
            rows = []
            for r in b.figures:
                c = r.cells()
                last = r.status if r.error else r.why
                if r.figure.kind == "exact":
                    verdict, why = exact_cell(r)
                    last = f"**{verdict}**" + (f". {why}" if why else "")
                rows.append([c["figure"], c["lecture"], c["this machine"], c["model"], last])
            out += _md_table([*FIGURE_COLUMNS, "matched, or where they differ and why"], rows)
        for sb in b.scenarios:
            o = sb.outcome
            state = (
                "ok" if o.ok else "**FAILED**" if o.failed else "interrupted" if o.interrupted else "not run"
            )
            out += [f"### {o.run.key} ({state}, {o.elapsed_s:.1f} s)", "", sb.description, ""]
            out += ["```", o.command, "```", ""]
            if o.failed:
                out += ["```", o.error, "```", ""]
            for img in sb.images:
                try:
                    rel = img.relative_to(base)
                except ValueError:
                    rel = img
                out += [f"![{img.stem}]({rel})", ""]
                if sb.captions.get(img):
                    out += [f"*{sb.captions[img]}*", ""]
            for t in (sb.result or {}).get("tables") or []:
                cols = table_columns(t)
                if not t.get("rows"):
                    continue
                out += [f"**{t.get('title', '')}**", ""]
                out += _md_table(
                    list(cols.values()), [[format_cell(r.get(k)) for k in cols] for r in t["rows"]]
                )
                out += [f"*{cols.get(k, k)}*: {v}  " for k, v in (t.get("legend") or {}).items()]
            out += [f"- {n}" for n in (sb.result or {}).get("notes") or []] + [""]
    return "\n".join(out)
