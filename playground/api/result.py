"""A finished run as the Python API returns it: result.json, and the files `inspect` writes.

`Result` is a read-only mapping of result.json (`r["elapsed_s"]`), with the keys every run has as
attributes (`ok`, `rows`, `tables`, `notes`, `failures`, `run_dir`) and, for a function launched on
ranks, `returned`: what each rank's call returned. `plot`, `trace` and `diagram` write from the
run's logs what `inspect --plot/--trace/--diagram` write. In a notebook it draws itself
(`_repr_html_`): a line about the run, its tables, notes and failures, and its PNG plots inline.
"""

import html
import io
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from playground.display.report import Table, data_uri, html_table, render_table


class OutputFile(os.PathLike):
    """A file a result wrote (a plot, a trace, a diagram): a path to open or pass on, which a
    notebook shows inline when it is an image."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"OutputFile({str(self.path)!r})"

    def _repr_png_(self) -> bytes | None:
        return self.path.read_bytes() if self.path.suffix.lower() == ".png" else None

    def _repr_svg_(self) -> str | None:
        return self.path.read_text() if self.path.suffix.lower() == ".svg" else None


class Result(Mapping):
    def __init__(self, result: dict):
        self._result = result

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "Result":
        """The result of an earlier run, from its directory (`runs/latest`, or one a command printed)."""
        return cls(json.loads((Path(run_dir) / "result.json").read_text()))

    def __getitem__(self, key: str) -> Any:
        return self._result[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._result)

    def __len__(self) -> int:
        return len(self._result)

    @property
    def ok(self) -> bool:
        return bool(self._result.get("ok"))

    @property
    def rows(self) -> list[dict]:
        """The first table's rows (bench's and simulate's nccl-tests rows, a lab's main table)."""
        return self._result.get("rows") or []

    @property
    def tables(self) -> list[dict]:
        """Every table: {"title", "rows", "columns"} (columns: key -> header, or None)."""
        return self._result.get("tables") or []

    @property
    def notes(self) -> list[str]:
        return self._result.get("notes") or []

    @property
    def failures(self) -> list[str]:
        return self._result.get("failures") or []

    @property
    def run_dir(self) -> Path:
        return Path(self._result["run_dir"])

    @property
    def returned(self) -> list[dict] | None:
        """What each rank's function returned, by rank (`launch` only; None for a scenario). A dict
        holds also the rank's bytes_sent and bytes_received; any other value is under "value"."""
        return self._result.get("returned")

    # -- the files inspect writes ------------------------------------------------------------
    def plot(self, path: str | os.PathLike | None = None) -> OutputFile:
        """The per-rank timeline (`inspect --plot`), by default timeline.png in the run directory."""
        from playground.display.plot import plot_timeline
        from playground.tracing.timeline import load_timeline

        out = Path(path) if path is not None else self.run_dir / "timeline.png"
        plot_timeline(load_timeline(self.run_dir)[0], out)
        return OutputFile(out)

    def trace(self, path: str | os.PathLike | None = None) -> OutputFile:
        """The Chrome trace (`inspect --trace`; open it in https://ui.perfetto.dev), by default
        trace.json in the run directory."""
        from playground.commands.inspect import write_trace
        from playground.tracing.timeline import load_timeline

        out = Path(path) if path is not None else self.run_dir / "trace.json"
        events, clocks = load_timeline(self.run_dir)
        write_trace(events, clocks, out)
        return OutputFile(out)

    def diagram(self, path: str | os.PathLike | None = None, **options) -> OutputFile:
        """The message diagram (`inspect --diagram`), by default messages.svg in the run directory;
        `options` are `draw_diagram`'s: time="logical"|"real", ops="all"|NAME, max_messages=N."""
        from playground.diagram import draw_diagram

        out = Path(path) if path is not None else self.run_dir / "messages.svg"
        draw_diagram(self.run_dir, out, **options)
        return OutputFile(out)

    # -- how it shows itself -----------------------------------------------------------------
    def headline(self) -> str:
        r = self._result
        state = "ok" if self.ok else "FAILED"
        where = f" over {r['transport']}" if r.get("transport") else ""
        took = f", {r['elapsed_s']:.2f} s" if isinstance(r.get("elapsed_s"), (int, float)) else ""
        ranks = f"{r.get('ranks', '?')} rank{'' if r.get('ranks') == 1 else 's'}"
        return f"{r.get('scenario', '?')}: {ranks}{where}{took}, {state} -> {r.get('run_dir')}"

    def __repr__(self) -> str:
        return f"<Result {self.headline()}>"

    def __str__(self) -> str:
        """The tables and notes as the command line prints them."""
        out = io.StringIO()
        console = Console(file=out, width=120, force_jupyter=False, force_terminal=False)
        console.print(self.headline(), highlight=False, markup=False)
        for t in self.tables:
            render_table(Table.from_dict(t), console)
        for line in [*self.notes, *(f"FAILED {f}" for f in self.failures)]:
            console.print(line, highlight=False, markup=False)
        return out.getvalue().rstrip()

    def _repr_html_(self) -> str:
        esc = html.escape
        colour = "#0a7a2f" if self.ok else "#b00020"
        out = [f"<p style='color: {colour}'><b>{esc(self.headline())}</b></p>"]
        out += [html_table(t) for t in self.tables if t.get("rows")]
        if self.notes:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>")
        if self.failures:
            out.append(
                "<ul style='color: #b00020'>" + "".join(f"<li>{esc(f)}</li>" for f in self.failures) + "</ul>"
            )
        for image in self.images():
            out.append(f"<img src='{data_uri(image)}' alt='{esc(image.name)}' style='max-width: 100%'>")
        return "".join(out)

    def images(self) -> list[Path]:
        """The PNG plots in the run directory (the lab's, bench's busbw.png, a drawn timeline)."""
        run_dir = Path(self._result.get("run_dir", ""))
        return sorted(run_dir.glob("*.png")) if self._result.get("run_dir") and run_dir.is_dir() else []
