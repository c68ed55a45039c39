"""A progress bar for a Jupyter notebook, where the terminal's does not draw.

rich's live display (the command line's progress bar, `report.progress_bar`) needs ipywidgets in a
notebook and only warns without it. This bar needs nothing but IPython, which every kernel has: it
is one HTML output (`display(..., display_id=True)`) redrawn in place through its display handle,
which JupyterLab, the classic notebook, VS Code and nbclient all honour. It offers the part of
rich's `Progress` the commands use (`add_task`, `update`, `advance`, a `with` block) and, like the
terminal's, it is gone when the block ends.
"""

import html
import time

from rich.progress import TaskID

REDRAW_S = 0.2  # at most this often: each redraw is a message from the kernel to the browser


class NotebookProgress:
    def __init__(self):
        self.tasks: dict[int, dict] = {}
        self.handle = None
        self.drawn_at = 0.0

    def __enter__(self) -> "NotebookProgress":
        from IPython.display import HTML, display

        self.handle = display(HTML(self.html()), display_id=True)
        return self

    def __exit__(self, *exc) -> None:
        from IPython.display import HTML

        if self.handle is not None:
            self.handle.update(HTML(""))

    def add_task(self, description: str, total: float | None = None, **_) -> TaskID:
        task = len(self.tasks)
        self.tasks[task] = {
            "description": description,
            "total": total,
            "completed": 0,
            "t0": time.monotonic(),
        }
        self.redraw(force=True)
        return TaskID(task)

    def update(
        self,
        task: int,
        *,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
        advance: float | None = None,
        **_,
    ) -> None:
        t = self.tasks[task]
        if completed is not None:
            t["completed"] = completed
        if advance is not None:
            t["completed"] += advance
        if total is not None:
            t["total"] = total
        if description is not None:
            t["description"] = description
        self.redraw(force=bool(t["total"]) and t["completed"] >= t["total"])

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def redraw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.handle is None or (not force and now - self.drawn_at < REDRAW_S):
            return
        from IPython.display import HTML

        self.drawn_at = now
        self.handle.update(HTML(self.html()))

    def html(self) -> str:
        """One line per task: description, bar, done/total, elapsed; a bar without a total (not
        known yet) is drawn as the browser's indeterminate bar."""
        lines = []
        for t in self.tasks.values():
            total, done = t["total"], t["completed"]
            bar = (
                f'<progress value="{done:g}" max="{total:g}"></progress>'
                if total
                else "<progress></progress>"
            )
            count = f"{done:g}/{total:g}" if total else f"{done:g}"
            elapsed = int(time.monotonic() - t["t0"])
            lines.append(
                f"<div style='font-family: monospace'>{html.escape(t['description'])} {bar} {count} "
                f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}</div>"
            )
        return "".join(lines)
