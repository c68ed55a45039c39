"""Plots drawn with matplotlib, and the one place matplotlib is set up.

Every plot in the playground goes through `figure`: the Agg backend (no screen needed), a
figure of the given size, then tight layout, savefig and close, so a failed plot never leaks a
figure and no module repeats the set-up. matplotlib is imported on first use, not at import:
node modules import their lab's plotting code, and every rank imports its node.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DPI = 110


@contextmanager
def figure(path: Path, figsize: tuple[float, float], *, dpi: int = DPI, **subplots: Any) -> Iterator[tuple]:
    """`with figure(path, (8, 4.5)) as (fig, ax): ...` draws into `ax` (an array of axes when
    `subplots` asks for a grid, e.g. ncols=2) and saves `path` when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=figsize, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)


_COLORS = {
    "send": "tab:blue",
    "wait": "tab:red",
    "reduce": "tab:green",
    "compute": "tab:orange",
    "phase": "tab:gray",
    "op": "lightgray",
}


def plot_xy(
    x: list,
    series: dict[str, list[float]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    bars: bool = False,
) -> None:
    """A small line (or grouped bar) chart of one or more series over the same x values."""
    with figure(path, (8, 4.5)) as (_, ax):
        if bars:
            width = 0.8 / max(len(series), 1)
            for k, (label, ys) in enumerate(series.items()):
                ax.bar([i + k * width for i in range(len(x))], ys, width, label=label)
            ax.set_xticks(
                [i + width * (len(series) - 1) / 2 for i in range(len(x))],
                [str(v) for v in x],
                rotation=15,
                fontsize=8,
            )
        else:
            for label, ys in series.items():
                ax.plot(x, ys, marker="o", ms=4, label=label)
            if logx:
                ax.set_xscale("log", base=2)
                ax.set_xticks(x, [str(v) for v in x])
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)


def plot_timeline(events_by_rank: dict[int, list[dict]], path: Path) -> None:
    """One lane per (rank, thread): timed operations in grey, send/wait/reduce/compute on top."""
    lanes = sorted({(r, e.get("tid", 0)) for r, evs in events_by_rank.items() for e in evs})
    t0 = min((e["ts"] for evs in events_by_rank.values() for e in evs), default=0.0)
    height = 1 + 0.45 * max(1, len(lanes))
    with figure(path, (12, height)) as (_, ax):
        for y, (rank, tid) in enumerate(lanes):
            for cat in ("op", "phase", "compute", "send", "wait", "reduce"):
                spans = [
                    ((e["ts"] - t0) / 1e3, max(e["dur"], 0.5) / 1e3)
                    for e in events_by_rank[rank]
                    if e.get("tid", 0) == tid and e.get("cat") == cat
                ]
                if spans:
                    h = 0.8 if cat in ("op", "phase") else 0.5
                    ax.broken_barh(spans, (y - h / 2, h), color=_COLORS[cat], label=cat)
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles, strict=False))
        ax.legend(uniq.values(), uniq.keys(), loc="upper right", ncols=len(uniq), fontsize=8)
        ax.set_yticks(range(len(lanes)), [f"rank {r}" + (f" t{t}" if t else "") for r, t in lanes])
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)")
        ax.set_title("per-rank timeline")


def plot_busbw(rows: list[dict], path: Path, title: str) -> None:
    """busbw against size, one line per algorithm (and baseline) and form (in place: its own line),
    log-scaled size axis."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        for prefix, label in (("", r["algorithm"]), ("ip_", f"{r['algorithm']}, in place")):
            busbw = r.get(prefix + "busbw_gbps")  # None: zero time, or a form not measured
            if r["size"] > 0 and busbw is not None:
                lines.setdefault(label, []).append((r["size"], busbw))
    with figure(path, (8, 4.5)) as (_, ax):
        for label, pts in lines.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"bus bandwidth: {title}")
        ax.grid(True, alpha=0.3)
        ax.legend()
