"""Reading a printed table back, as a reader would, to check that it fits and that no value is cut.

`printed(table, width)` renders a Table as the commands do, at a terminal width (None: piped);
`read_back(text)` parses rich's boxes back into rows (header -> cell), joining a header that wrapped
and the parts of a table split across parts; `assert_fits` checks a rendering against the table:
every line within the width, no ellipsis, every column present once, every cell as it was
formatted, in its row. Cells of text that wrap (spaces inside) are compared with their words rejoined.
"""

import io
import os
from contextlib import contextmanager

from rich.console import Console

from playground.display.report import Table, cell_text, render_table


@contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def printed(table: Table, width: int | None, wide: bool = False) -> str:
    """What `render_table` prints on a terminal `width` columns wide (None: piped, 200)."""
    out = io.StringIO()
    console = Console(file=out, width=width or 200, force_terminal=False, color_system=None)
    with _env(PLAYGROUND_WIDE="1" if wide else None):
        render_table(table, console)
    return out.getvalue()


def _cells(line: str, bar: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split(bar)]


def read_back(text: str) -> list[dict[str, str]]:
    """The rows of every part of the printed table, merged by row index (header -> cell)."""
    rows: list[dict[str, str]] = []
    header: list[list[str]] = []
    body: list[list[str]] = []

    def close():
        if not header:
            return
        names = [" ".join(w for w in col if w) for col in zip(*header, strict=True)]
        for i, cells in enumerate(body):
            while len(rows) <= i:
                rows.append({})
            for name, cell in zip(names, cells, strict=True):
                assert rows[i].get(name, cell) == cell, f"{name}: {rows[i][name]!r} and {cell!r}"
                rows[i][name] = cell

    for line in text.splitlines():
        s = line.strip()
        if s.startswith("┏"):
            close()
            header, body = [], []
        elif s.startswith("┃"):
            header.append(_cells(s, "┃"))
        elif s.startswith("│"):
            cells = _cells(s, "│")
            if body and cells[0] == "":  # a row's next line: its wrapped cells go on
                body[-1] = [f"{a} {b}".strip() for a, b in zip(body[-1], cells, strict=True)]
            else:
                body.append(cells)
    close()
    return rows


def assert_fits(table: Table, width: int | None) -> str:
    """Render `table` at `width` (None: piped) and check it against its own rows; returns the text."""
    text = printed(table, width)
    if width is not None:
        too_wide = [line for line in text.splitlines() if len(line.rstrip()) > width]
        assert not too_wide, f"{len(too_wide[0].rstrip())} > {width}: {too_wide[0]}"
    assert "…" not in text, text
    columns = table.columns or {k: k for k in table.rows[0]}
    got = read_back(text)
    assert len(got) == len(table.rows), text
    for want, row in zip(table.rows, got, strict=True):
        assert set(row) == set(columns.values()), (sorted(row), text)
        for key, header in columns.items():
            expected = " ".join(cell_text(key, want.get(key)).split())
            assert row[header] == expected, f"{header}: {row[header]!r}, expected {expected!r}\n{text}"
    return text
