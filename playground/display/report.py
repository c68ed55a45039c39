"""What a node's results turn into: tables for the terminal and rows for result.json.

A node module may define `summarize(results, params, run_dir) -> Report`, run in the launcher
once every rank has finished (`results[r]` is what rank r's `main` returned). One rule decides
what it sees, so no node writes a failure preamble:

- a rank that could not produce its data returns `{"ok": False, "error": "why"}` (or raises);
  the run fails with `rank r: why` for each such rank and `summarize` is not called;
- otherwise `summarize` gets every rank's result. A rank may return `"ok": False` *with* its data
  (a correctness check failed: wrong elements, a bad checksum); the report says which check, and
  the run fails even if the report forgot to (`rank r: not ok`).

Without `summarize`, the launcher shows rank 0's `rows` under the same rule.
"""

import base64
import contextlib
import dataclasses
import html
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playground.display.fit import Column, Part, fit, table_width

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from playground.display.notebook import NotebookProgress


@dataclass(frozen=True)
class Table:
    """Rows under a title. `keys`: the columns that name a row (default the first), which start
    every part of a table too wide for the terminal; `legend`: column key -> what a column a reader
    cannot guess means, said once under the table."""

    title: str
    rows: list[dict]
    columns: dict[str, str] | None = None  # key -> header, in display order; None: keys of row 0
    keys: tuple[str, ...] = ()
    legend: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """As result.json keeps it."""
        out = {"title": self.title, "rows": self.rows, "columns": self.columns}
        return {**out, "keys": list(self.keys), "legend": self.legend} if self.legend or self.keys else out

    @classmethod
    def from_dict(cls, table: dict) -> "Table":
        return cls(
            table.get("title", ""),
            table.get("rows") or [],
            table.get("columns"),
            tuple(table.get("keys") or ()),
            table.get("legend") or {},
        )


@dataclass(frozen=True)
class Report:
    ok: bool
    tables: list[Table]
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # why ok is False, one line each
    data: dict = field(default_factory=dict)  # extra keys for result.json
    files: list[str] = field(default_factory=list)  # plots and other files written to the run dir


def failed_ranks(results: list[dict]) -> list[str]:
    """`rank r: why` for every rank that returned an error instead of its data."""
    return [
        f"rank {r}: {res['error']}"
        for r, res in enumerate(results)
        if not res.get("ok", True) and res.get("error")
    ]


def with_rank_checks(report: Report, results: list[dict]) -> Report:
    """`report`, failed if some rank returned ok False and the report did not say why."""
    not_ok = [f"rank {r}: not ok" for r, res in enumerate(results) if not res.get("ok", True)]
    if not not_ok or not report.ok:
        return report
    return dataclasses.replace(report, ok=False, failures=[*report.failures, *not_ok])


def default_report(results: list[dict], title: str) -> Report:
    rows = results[0].get("rows", []) if results else []
    return with_rank_checks(Report(ok=True, tables=[Table(title, rows)]), results)


PIPED_WIDTH = 200  # output to a file or pipe: no terminal to fit, and a log is read in an editor


def make_console(stderr: bool = False) -> "Console":
    """A console as wide as the terminal, or as $COLUMNS says; piped, `PIPED_WIDTH`. (rich is imported
    here and in the functions that draw, not with the module: every rank imports this one for its
    `Report`, and draws nothing.)"""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    return Console(stderr=stderr, width=None if stream.isatty() else width)


WIDE_HELP = "print each table in one piece at its full width, however wide the terminal (PLAYGROUND_WIDE=1)"


def wide() -> bool:
    """PLAYGROUND_WIDE=1 (`--wide`): every table in one piece at its full width."""
    return os.environ.get("PLAYGROUND_WIDE", "") not in ("", "0")


def format_cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        a = abs(value)
        if a >= 1000:
            return f"{value:,.0f}"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}" if a >= 0.001 else f"{value:.2e}"
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value}"
    return str(value)


@dataclass(frozen=True)
class TablePart:
    """One piece of a table as it fits a width: its title, its column keys and each one's width."""

    title: str
    keys: tuple[str, ...]
    widths: tuple[int, ...]


def table_parts(table: Table, width: int | None) -> list[TablePart]:
    """`table` cut to fit `width` characters (display/fit.py: headers and text wrap, columns move to
    a next part that starts with the columns naming a row); None: one piece at full width."""
    shown = table.columns or {k: k for k in table.rows[0]}
    named = [k for k in table.keys if k in shown] or naming_columns(table.rows, list(shown))
    keys = [*named, *(k for k in shown if k not in named)]
    fitted = [
        Column(shown[k], tuple(cell_text(k, r.get(k)) for r in table.rows), _numeric(table, k)) for k in keys
    ]
    if width is None:
        parts = [Part(tuple(range(len(keys))), tuple(c.natural for c in fitted))]
    else:
        parts = fit(fitted, width, len(named))
    if len(parts) == 1:  # in one piece, the columns in the table's own order
        order = [keys.index(k) for k in shown]
        parts = [Part(tuple(order), tuple(parts[0].widths[i] for i in order))]
    first = table.title.splitlines()[0] if table.title else ""
    return [
        TablePart(
            table.title if n == 0 else f"{first} (continued)", tuple(keys[i] for i in p.columns), p.widths
        )
        for n, p in enumerate(parts)
    ]


def _numeric(table: Table, key: str) -> bool:
    v = table.rows[0].get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def legend_lines(table: Table) -> list[str]:
    """The legend under a table: "header: what the column means", once each."""
    columns = table.columns or {k: k for k in table.rows[0]} if table.rows else {}
    return [f"{columns.get(k, k)}: {meaning}" for k, meaning in table.legend.items()]


def render_table(table: Table, console: "Console") -> None:
    """The table fitted to the console's width (`table_parts`), or in one piece with
    PLAYGROUND_WIDE; its legend once under it."""
    from rich.table import Table as RichTable

    if not table.rows:
        console.print(f"[bold]{table.title}[/bold]: no rows")
        return
    columns = table.columns or {k: k for k in table.rows[0]}
    for part in table_parts(table, None if wide() else console.width):
        rt = RichTable(title=part.title, title_justify="left", header_style="bold")
        for key, w in zip(part.keys, part.widths, strict=True):
            right = _numeric(table, key)
            rt.add_column(columns[key], justify="right" if right else "left", width=w, overflow="fold")
        for row in table.rows:
            rt.add_row(*(cell_text(k, row.get(k)) for k in part.keys))
        with _at_least(console, table_width(part.widths)):
            console.print(rt, crop=False)
    for line in legend_lines(table):
        console.print(line, highlight=False)


def naming_columns(rows: list[dict], keys: list[str], most: int = 4) -> list[str]:
    """The fewest leading columns (at most `most`) whose values tell every row apart, which a part
    of a split table starts with; the first column when none do."""
    for n in range(1, min(most, len(keys) - 1) + 1):
        seen = {tuple(cell_text(k, r.get(k)) for k in keys[:n]) for r in rows}
        if len(seen) == len(rows):
            return keys[:n]
    return keys[:1]


@contextlib.contextmanager
def _at_least(console: "Console", width: int):
    """The console at least `width` wide while a table of that width is printed (PLAYGROUND_WIDE:
    wider than the terminal, which then wraps the lines rather than the table cutting values)."""
    saved = console._width  # None: the terminal's own width
    if width > console.width:
        console.width = width
    try:
        yield
    finally:
        console._width = saved


def cell_text(key: str, value: Any) -> str:
    """A wrong-element count of -1 means the row was not checked: nccl-tests prints N/A."""
    if value == -1 and key.endswith("wrong") and not isinstance(value, bool):
        return "n/a"
    return format_cell(value)


def table_columns(table: dict) -> dict[str, str]:
    """A result.json table's key -> header map: its own, else the keys of its first row."""
    rows = table.get("rows") or []
    return table.get("columns") or ({k: k for k in rows[0]} if rows else {})


def html_table(table: dict) -> str:
    """A result.json table as HTML (the lecture page, a result in a notebook); numbers right-aligned."""
    esc = html.escape
    columns = table_columns(table)
    out = [f'<div class="wide"><table><caption>{esc(str(table.get("title", "")))}</caption><tr>']
    out += [f"<th>{esc(str(h))}</th>" for h in columns.values()]
    out.append("</tr>")
    for row in table.get("rows") or []:
        out.append("<tr>")
        for key in columns:
            v = row.get(key)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            text = esc(cell_text(key, v))
            out.append(
                f'<td class="num" style="text-align: right">{text}</td>' if num else f"<td>{text}</td>"
            )
        out.append("</tr>")
    out.append("</table></div>")
    legend = table.get("legend") or {}
    if legend:
        out.append('<p class="legend">')
        out += [f"<b>{esc(str(columns.get(k, k)))}</b>: {esc(str(v))}<br>" for k, v in legend.items()]
        out.append("</p>")
    return "".join(out)


_MIME = {".png": "image/png", ".svg": "image/svg+xml"}


def data_uri(path: Path) -> str:
    """An image file inside an HTML page; an SVG in an <img> runs no script and fetches nothing."""
    mime = _MIME.get(path.suffix.lower(), "image/png")
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_report(report: Report, console: "Console") -> None:
    for table in report.tables:
        render_table(table, console)
    for note in report.notes:
        console.print(note, highlight=False)


def progress_bar(console: "Console") -> "Progress | NotebookProgress":
    """The bar of a long command (description, bar, done/total, elapsed) on `console`, gone when done;
    in a Jupyter notebook, where rich's live display needs ipywidgets, the same bar drawn as HTML
    (`playground.display.notebook`)."""
    if console.is_jupyter:
        from playground.display.notebook import NotebookProgress

        return NotebookProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
