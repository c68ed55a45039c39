"""A message diagram's layout (diagram/layout.py) drawn as SVG text.

Plain SVG text rather than matplotlib: every element is ours to name (each message is a
`<g class="message">` holding one `<line class="arrow">`, with a tooltip), text stays text at any
zoom, a figure is about 0.6 KB a message (180 KB at the 300-message limit), and the lecture page
embeds it as it is.
The only judgment here is where labels go: each is put at the first of a few points along its
arrow, or just above or below it, where it overlaps no lane and no label already placed, shortest
arrows first, so that a long arrow (the ring's wrap-around from the last rank to rank 0, which
crosses every other arrow of its step) finds room between the others' labels.
"""

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from playground.diagram.layout import Layout
from playground.diagram.tags import OTHER_COLORS, TAG_COLORS, tag_name

ROW_PX = 24  # one Lamport tick
LANE_PX = 120  # between two ranks' lanes
LEFT_PX = 100  # the gutter for the calls' names
RIGHT_PX = 58  # the time axis
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
FONT_PX = 10
CHAR_PX = 5.9  # a label's width per character at FONT_PX (sans-serif, estimated for collisions)
DOT_PX = 2.6
PHASE_COLORS = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fdd0a2", "#c7e9c0")
BAND_FILLS = ("#eef2f9", "#f7f2ea")
ALONG = (0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85)  # where on its arrow a label may go, in order
ACROSS_PX = (0, -8, 8)  # and how far above or below the arrow


def _attrs(**kw) -> str:
    """SVG attributes from keywords: font_size -> font-size, class_ -> class, values quoted."""
    return " ".join(f"{k.rstrip('_').replace('_', '-')}={quoteattr(str(v))}" for k, v in kw.items())


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, **kw) -> str:
    return f"<text {_attrs(x=_num(x), y=_num(y), **kw)}>{escape(text)}</text>"


def _colors(keys, palette: tuple[str, ...], fixed: dict | None = None) -> dict:
    out, i = {}, 0
    for k in keys:
        if fixed and k in fixed:
            out[k] = fixed[k]
        else:
            out[k] = palette[i % len(palette)]
            i += 1
    return out


def _nice_step(at_least: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is at least `at_least` (> 0)."""
    scale = 10.0 ** math.floor(math.log10(at_least))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= at_least)


def _ticks(start: float, stop: float, step: float) -> list[float]:
    return [start + k * step for k in range(int((stop - start) / step + 1e-9) + 1)]


def _time_text(us: float) -> str:
    return f"{_num(us / 1e3)} ms" if us >= 1000 else f"{_num(us)} us"


def _overlap(a: tuple, b: tuple) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def label_box(cx: float, cy: float, text: str) -> tuple[float, float, float, float]:
    w, h = len(text) * CHAR_PX + 4, FONT_PX + 3
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


class Taken:
    """The boxes labels must avoid, kept in horizontal strips so that a new label is checked
    against its neighbours only (a 1000-message diagram places its labels in well under a second)."""

    STRIP_PX = 48

    def __init__(self, boxes=()):
        self.strips: dict[int, list[tuple]] = {}
        for box in boxes:
            self.add(box)

    def _strips(self, box: tuple) -> range:
        return range(int(box[1] // self.STRIP_PX), int(box[3] // self.STRIP_PX) + 1)

    def add(self, box: tuple) -> None:
        for k in self._strips(box):
            self.strips.setdefault(k, []).append(box)

    def overlap(self, box: tuple) -> float:
        """The area `box` shares with the boxes taken (each counted once)."""
        near = {b for k in self._strips(box) for b in self.strips.get(k, ())}
        return sum(_overlap(box, b) for b in near)


def place_label(x0: float, y0: float, x1: float, y1: float, text: str, taken: Taken) -> tuple:
    """The box of a label for the arrow (x0, y0) -> (x1, y1): the first of a few points along it,
    on it or just above or below, whose box overlaps nothing in `taken` (the labels placed so far
    and the lanes); else the one that overlaps least. The box is added to `taken`."""
    best = None
    for f in ALONG:
        for dy in ACROSS_PX:
            box = label_box(x0 + (x1 - x0) * f, y0 + (y1 - y0) * f + dy, text)
            hit = taken.overlap(box)
            if best is None or hit < best[0]:
                best = (hit, box)
            if hit == 0:
                taken.add(box)
                return box
    assert best is not None  # ALONG and ACROSS_PX are not empty
    taken.add(best[1])
    return best[1]


@dataclass(frozen=True)
class _Frame:
    """Where things go: lane x per rank, and y of a layout value."""

    lane_x: dict[int, float]
    top: float
    scale: float
    logical: bool
    bottom: float
    right: float

    def y(self, v: float) -> float:
        return self.top + (v - 0.5) * self.scale if self.logical else self.top + ROW_PX / 2 + v * self.scale


def _wrap(text: str, width_px: float) -> list[str]:
    return textwrap.wrap(text, max(int(width_px / CHAR_PX), 20))


def render_svg(lay: Layout, title: str, notes: Sequence[str] = ()) -> str:
    """The SVG text of a layout: lanes, bands, phase bars, one `<g class="message">` per arrow."""
    n = len(lay.ranks)
    width = max(LEFT_PX + LANE_PX * n + RIGHT_PX, 560)
    logical = lay.time == "logical"
    lines = [
        "time runs down in Lamport order: events that need not wait for each other share a row"
        if logical
        else "time runs down in real time: every rank's clock shifted onto rank 0's",
        "an arrow is one message, from its send to its receive, labelled with its tag and bytes",
    ]
    if lay.bands:
        lines.append("a band is one timed call; a bar on a lane, one of its phases on that rank")
    head = [(line, "#444") for text in lines for line in _wrap(text, width - 24)]
    head += [(line, "#b00020") for note in notes for line in _wrap(note, width - 24)]
    tags = _colors(dict.fromkeys(a.tag for a in lay.arrows), OTHER_COLORS, TAG_COLORS)
    phases = _colors(dict.fromkeys(b.name for b in lay.bars), PHASE_COLORS)
    legend = _legend(tags, phases, width)
    legend_y = 40 + 15 * len(head)
    top = legend_y + 40 + 16 * max((line for _, line, _, _ in legend), default=0)
    rows = max(lay.rows, 4)
    scale = ROW_PX if logical else rows * ROW_PX / lay.y_max if lay.y_max > 0 else 1.0
    bottom = top + (rows + 0.5) * ROW_PX
    lane_x = {r: LEFT_PX + LANE_PX * (i + 0.5) for i, r in enumerate(lay.ranks)}
    frame = _Frame(lane_x, top, scale, logical, bottom, LEFT_PX + LANE_PX * n)
    height = bottom + 30 + 15 * len(notes)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" {_attrs(width=int(width), height=int(height))} '
        f"{_attrs(viewBox=f'0 0 {int(width)} {int(height)}', font_family=FONT, font_size=FONT_PX)}>",
        f"<title>{escape(title)}</title>",
        "<style>.label rect{fill:#fff;fill-opacity:.88}.message:hover line{stroke-width:2.6}</style>",
        "<defs>",
    ]
    marker = {}
    for i, color in enumerate(dict.fromkeys(tags.values())):
        marker[color] = f"head{i}"
        out.append(
            f'<marker id="head{i}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6.5" '
            f'markerHeight="6.5" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker>'
        )
    out.append("</defs>")
    out.append(f"<rect {_attrs(width='100%', height='100%', fill='#fff')}/>")
    out.append(_text(12, 20, title, font_size=14, font_weight="bold"))
    out += [_text(12, 38 + 15 * i, line, fill=color) for i, (line, color) in enumerate(head)]
    for x, line, sample, name in legend:
        y = legend_y + 16 * line
        out.append(sample.replace("{y}", _num(y - (3 if "<line" in sample else 9))))
        out.append(_text(x + 22, y, name))
    out += _bands(lay, frame)
    out += _lanes(lay, frame)
    out += _bars(lay, frame, phases)
    out += _axis(lay, frame)
    out += _messages(lay, frame, tags, marker)
    out += [_text(12, bottom + 36 + 15 * i, note, fill="#b00020") for i, note in enumerate(notes)]
    out.append("</svg>\n")
    return "\n".join(out)


def _legend(tags: dict, phases: dict, width: float) -> list[tuple[float, int, str, str]]:
    """(x, line, element, name) of each legend entry: every tag's colour, then every phase's, wrapped
    to `width`."""
    items = [("tag", tag_name(tag), color) for tag, color in tags.items()]
    items += [("phase", name, color) for name, color in phases.items()]
    out: list[tuple[float, int, str, str]] = []
    x, line = 12.0, 0
    for kind, name, color in items:
        w = 30 + len(name) * CHAR_PX
        if x + w > width - 12 and x > 12:
            x, line = 12.0, line + 1
        if kind == "tag":
            sample = f'<line {_attrs(x1=_num(x), x2=_num(x + 18))} y1="{{y}}" y2="{{y}}" stroke="{color}" stroke-width="2"/>'
        else:
            sample = f'<rect {_attrs(x=_num(x + 5), width=8, height=11)} y="{{y}}" fill="{color}"/>'
        out.append((x, line, sample, name))
        x += w
    return out


def _bands(lay: Layout, fr: _Frame) -> list[str]:
    out = ['<g class="bands">']
    for i, band in enumerate(lay.bands):
        y0, y1 = fr.y(band.y0), fr.y(band.y1)
        rect = _attrs(x=LEFT_PX, y=_num(y0), width=_num(fr.right - LEFT_PX), height=_num(max(y1 - y0, 2)))
        out.append(
            f'<g class="band"><rect {rect} fill="{BAND_FILLS[i % 2]}"/>'
            f'<line {_attrs(x1=8, y1=_num(y0), x2=_num(fr.right), y2=_num(y0))} stroke="#c3cad8" '
            f'stroke-dasharray="3 3"/>{_text(10, y0 + 13, band.name, font_weight="bold")}'
            f"{_text(10, y0 + 26, band.detail, fill='#444')}</g>"
        )
    return [*out, "</g>"]


def _lanes(lay: Layout, fr: _Frame) -> list[str]:
    out = ['<g class="lanes">']
    for r, x in fr.lane_x.items():
        line = _attrs(x1=_num(x), y1=fr.top - 8, x2=_num(x), y2=_num(fr.bottom))
        out.append(
            f'<g class="lane"><line {line} stroke="#444"/>'
            f"{_text(x, fr.top - 14, f'rank {r}', text_anchor='middle', font_weight='bold')}"
            f"{_text(x, fr.bottom + 14, f'rank {r}', text_anchor='middle', font_weight='bold')}</g>"
        )
    return [*out, "</g>"]


def _bars(lay: Layout, fr: _Frame, phases: dict) -> list[str]:
    out = ['<g class="phases">']
    for bar in lay.bars:
        y0, y1 = fr.y(bar.y0), fr.y(bar.y1)
        box = _attrs(x=_num(fr.lane_x[bar.rank] - 4), y=_num(y0), width=8, height=_num(max(y1 - y0, 2)))
        out.append(
            f'<rect class="phase" {box} fill="{phases[bar.name]}">'
            f"<title>rank {bar.rank}: {escape(bar.name)}</title></rect>"
        )
    return [*out, "</g>"]


def _axis(lay: Layout, fr: _Frame) -> list[str]:
    x = fr.right + 8
    out = [
        f'<g class="axis" fill="#666"><line {_attrs(x1=x, y1=fr.top, x2=x, y2=_num(fr.bottom - ROW_PX / 2))} stroke="#999"/>'
    ]
    if fr.logical:
        step = _nice_step(48 / ROW_PX)
        ticks = [(t, f"{t:.0f}") for t in _ticks(step, lay.rows, step)]
    else:
        step = _nice_step(48 / fr.scale) if lay.y_max > 0 else 1.0
        ticks = [(t, _time_text(t)) for t in _ticks(0.0, lay.y_max, step)]
    for t, text in ticks:
        y = fr.y(t)
        out.append(f'<line {_attrs(x1=x, y1=_num(y), x2=x + 4, y2=_num(y))} stroke="#999"/>')
        out.append(_text(x + 6, y + 3, text))
    out.append(_text(x + 2, fr.top - 14, "Lamport" if fr.logical else "time"))
    return [*out, "</g>"]


def _messages(lay: Layout, fr: _Frame, tags: dict, marker: dict) -> list[str]:
    """One group per arrow (line, its two events, a tooltip); then the labels on top, placed
    shortest arrow first so that a long one (the ring's wrap-around) fits around the others."""
    taken = Taken((x - DOT_PX - 1, fr.top, x + DOT_PX + 1, fr.bottom) for x in fr.lane_x.values())
    out, ends = ['<g class="messages">'], []
    for a in lay.arrows:
        x0, y0, x1, y1 = fr.lane_x[a.src], fr.y(a.y0), fr.lane_x[a.dst], fr.y(a.y1)
        ends.append((x0, y0, x1, y1))
        color = tags[a.tag]
        length = max(math.hypot(x1 - x0, y1 - y0), 1e-9)
        tip_x, tip_y = x1 - (x1 - x0) / length * DOT_PX, y1 - (y1 - y0) / length * DOT_PX
        line = _attrs(x1=_num(x0), y1=_num(y0), x2=_num(tip_x), y2=_num(tip_y), stroke=color)
        what = f"rank {a.src} -> rank {a.dst}: {a.label} (tag {a.tag}, message {a.seq} on it)"
        out.append(
            f'<g class="message" {_attrs(data_src=a.src, data_dst=a.dst, data_tag=a.tag, data_seq=a.seq)}>'
            f"<title>{escape(what)}</title>"
            f'<line class="arrow" {line} stroke-width="1.3" marker-end="url(#{marker[color]})"/>'
            f"<circle {_attrs(cx=_num(x0), cy=_num(y0), r=DOT_PX, fill=color)}/>"
            f"<circle {_attrs(cx=_num(x1), cy=_num(y1), r=DOT_PX, fill='#fff', stroke=color)}/></g>"
        )
    out.append("</g>")
    out.append('<g class="labels">')
    order = sorted(range(len(lay.arrows)), key=lambda i: abs(ends[i][2] - ends[i][0]))
    for i in order:
        a = lay.arrows[i]
        x0, y0, x1, y1 = place_label(*ends[i], a.label, taken)
        out.append(
            f'<g class="label"><rect {_attrs(x=_num(x0), y=_num(y0), width=_num(x1 - x0), height=_num(y1 - y0), rx=2)}/>'
            f"{_text((x0 + x1) / 2, y1 - 3.5, a.label, text_anchor='middle', fill=tags[a.tag])}</g>"
        )
    return [*out, "</g>"]
