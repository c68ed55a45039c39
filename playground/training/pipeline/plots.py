"""The pipeline's figures: each schedule drawn from the trace as the GPipe and Megatron-LM papers
draw theirs (one row per stage, a box per forward and backward, coloured by micro-batch), with the
model's timeline under it; the bubble against m, measured, modelled and the formula."""

from pathlib import Path

from playground.display.plot import figure
from playground.models.pipeline import bubble_fraction

MIN_LABEL_FRACTION = 0.018  # a box narrower than this share of the axis gets no label


def _draw(ax, stages: dict[int, list[tuple]], num_stages: int, title: str) -> float:
    """Boxes (kind, micro-batch, start_s, end_s) per stage, time from the first start, in ms;
    returns the last end, in ms. One collection per stage and kind (a box each would be an artist
    each: a 16-micro-batch schedule draws hundreds)."""
    from matplotlib.colors import to_rgba

    t0 = min(x[2] for actions in stages.values() for x in actions)
    t1 = max(x[3] for actions in stages.values() for x in actions)
    span = max((t1 - t0) * 1e3, 1e-9)
    for s, actions in stages.items():
        for forward in (True, False):
            boxes = [(kind, mb, start, end) for kind, mb, start, end in actions if (kind == "F") == forward]
            if not boxes:
                continue
            ax.broken_barh(
                [((start - t0) * 1e3, (end - start) * 1e3) for _, _, start, end in boxes], (s - 0.4, 0.8),
                facecolors=[to_rgba(f"C{mb % 10}", 1.0 if forward else 0.55) for _, mb, _, _ in boxes],
                edgecolor="black", linewidth=0.4, hatch=None if forward else "//",
            )  # fmt: skip
            for kind, mb, start, end in boxes:
                x, w = (start - t0) * 1e3, (end - start) * 1e3
                if w / span >= MIN_LABEL_FRACTION:
                    ax.text(
                        x + w / 2, s, f"{kind}{mb}", ha="center", va="center", fontsize=6, in_layout=False
                    )
    ax.set_yticks(range(num_stages), [f"stage {s}" for s in range(num_stages)])
    ax.set_ylim(num_stages - 0.5, -0.5)
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return (t1 - t0) * 1e3


def plot_schedule(
    path: Path,
    measured: dict[int, list[tuple]],
    model: dict[int, list[tuple]],
    num_stages: int,
    m: int,
    title: str,
) -> None:
    """The measured step (one replica, from the trace) over the model's on one time axis, solid
    boxes forward, hatched backward, each micro-batch its own colour."""
    with figure(path, (10, 1.2 + 1.0 * num_stages), nrows=2, sharex=True) as (_, axes):
        end = _draw(axes[0], measured, num_stages, f"{title}: measured (trace)")
        end = max(
            end,
            _draw(axes[1], model, num_stages, "model: calibrated compute, alpha-beta sends, cores shared"),
        )
        axes[1].set_xlim(0, end)
        axes[1].set_xlabel("ms from the step's first forward")


def plot_bubbles(path: Path, rows: list[dict], num_stages: int, title: str) -> None:
    """Bubble (%) against m: the formula, and per schedule the measured and the modelled."""
    with figure(path, (7, 4.5)) as (_, ax):
        ms = sorted({r["m"] for r in rows})
        ax.plot(ms, [100 * bubble_fraction(num_stages, m) for m in ms], "k-", lw=1.5, label="(p-1)/(m+p-1)")
        for i, name in enumerate(dict.fromkeys(r["schedule"] for r in rows)):
            mine = sorted((r for r in rows if r["schedule"] == name), key=lambda r: r["m"])
            ax.plot(
                [r["m"] for r in mine],
                [r["bubble_pct"] for r in mine],
                "o-",
                color=f"C{i}",
                label=f"{name} measured",
            )
            ax.plot(
                [r["m"] for r in mine],
                [r["model_pct"] for r in mine],
                "x--",
                color=f"C{i}",
                label=f"{name} model",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batches m")
        ax.set_ylabel("bubble (% of stages x step)")
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
