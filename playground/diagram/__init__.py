"""The message diagram of a run: a Lamport (space-time) diagram, one lane per rank, time running
down, an arrow per message from its send to its receive (`inspect RUN --diagram FILE.svg`).

What goes where:
- layout.py: the pure part, a run's aligned events -> lanes, arrows, bands and bars, on a logical
  (Lamport) or real time axis; unit-tested on synthetic logs;
- tags.py: what each message tag is called and drawn as;
- svg.py: a layout -> SVG text (the only judgment there: where labels go);
- draw.py: `draw_diagram(run_dir, path, ...) -> DiagramInfo`, reading the run, checking that it
  can be drawn (one line otherwise) and writing the file.
"""

from playground.diagram.draw import MAX_RANKS, DiagramInfo, draw_diagram
from playground.diagram.layout import MAX_MESSAGES, Layout, layout

__all__ = ["MAX_MESSAGES", "MAX_RANKS", "DiagramInfo", "Layout", "draw_diagram", "layout"]
