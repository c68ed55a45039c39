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
import dataclasses
import html
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

if TYPE_CHECKING:
    from playground.display.notebook import NotebookProgress


@dataclass(frozen=True)
class Table:
    title: str
    rows: list[dict]
    columns: dict[str, str] | None = None  # key -> header, in display order; None: keys of row 0


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


def make_console(stderr: bool = False) -> Console:
    """A console that never wraps tables when output goes to a file or pipe."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 200)


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


def render_table(table: Table, console: Console) -> None:
    if not table.rows:
        console.print(f"[bold]{table.title}[/bold]: no rows")
        return
    columns = table.columns or {k: k for k in table.rows[0]}
    rt = RichTable(title=table.title, title_justify="left", header_style="bold")
    for key, header in columns.items():
        numeric = isinstance(table.rows[0].get(key), (int, float)) and not isinstance(
            table.rows[0].get(key), bool
        )
        rt.add_column(header, justify="right" if numeric else "left")
    for row in table.rows:
        rt.add_row(*(cell_text(k, row.get(k)) for k in columns))
    console.print(rt)


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
    return "".join(out)


_MIME = {".png": "image/png", ".svg": "image/svg+xml"}


def data_uri(path: Path) -> str:
    """An image file inside an HTML page; an SVG in an <img> runs no script and fetches nothing."""
    mime = _MIME.get(path.suffix.lower(), "image/png")
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_report(report: Report, console: Console) -> None:
    for table in report.tables:
        render_table(table, console)
    for note in report.notes:
        console.print(note, highlight=False)


def progress_bar(console: Console) -> "Progress | NotebookProgress":
    """The bar of a long command (description, bar, done/total, elapsed) on `console`, gone when done;
    in a Jupyter notebook, where rich's live display needs ipywidgets, the same bar drawn as HTML
    (`playground.display.notebook`)."""
    if console.is_jupyter:
        from playground.display.notebook import NotebookProgress

        return NotebookProgress()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
