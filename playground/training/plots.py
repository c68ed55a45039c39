"""The training lab's plot: the loss of every step, one line per mode (and PyTorch DDP's).

The modes start from the same weights and see the same batches, so their losses agree to
rounding: drawn plainly, their lines lie exactly on top of each other and only the last one
drawn shows. So each mode gets its own line style and markers at offset steps (every line stays
visible where they coincide), and, with more than one curve, a second panel draws each curve's
difference from the first: the rounding, at its own scale.
"""

from pathlib import Path

from playground.display.plot import figure

STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v")
NUM_MARKS = 12  # markers along each line


def largest_difference(curves: dict[str, list[float]]) -> float:
    """The largest |loss - the first curve's loss| at any step, over every other curve."""
    ref = next(iter(curves.values()), [])
    return max(
        (abs(a - b) for c in list(curves.values())[1:] for a, b in zip(c, ref, strict=False)), default=0.0
    )


def plot_losses(curves: dict[str, list[float]], path: Path, title: str) -> None:
    """Loss against step, each curve visible (see the module doc); with several curves, their
    differences from the first below."""
    several = len(curves) > 1
    with figure(
        path, (8, 6.5 if several else 4.5), nrows=2 if several else 1, sharex=True, squeeze=False
    ) as (_, axes):
        ax = axes[0][0]
        for i, (label, losses) in enumerate(curves.items()):
            every = max(1, len(losses) // NUM_MARKS)
            ax.plot(
                range(len(losses)),
                losses,
                STYLES[i % len(STYLES)],
                color=f"C{i}",
                lw=1.4,
                marker=MARKERS[i % len(MARKERS)],
                markevery=(every * i // max(1, len(curves)), every),  # offset: each mode's own marks
                markersize=5,
                fillstyle="none",
                label=label,
            )
        ax.set_ylabel("loss (cross-entropy per byte, nats)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        if several:
            ax.set_title(
                f"{title}\nthe curves agree to rounding (largest difference "
                f"{largest_difference(curves):.1e}): see below",
                fontsize=10,
            )
            first, ref = next(iter(curves.items()))
            diff = axes[1][0]
            for i, (label, losses) in enumerate(list(curves.items())[1:], start=1):
                every = max(1, len(losses) // NUM_MARKS)
                diff.plot(
                    range(min(len(losses), len(ref))),
                    [a - b for a, b in zip(losses, ref, strict=False)],
                    STYLES[i % len(STYLES)],
                    color=f"C{i}",
                    lw=1.2,
                    marker=MARKERS[i % len(MARKERS)],
                    markevery=(every * i // len(curves), every),
                    markersize=5,
                    fillstyle="none",
                    label=f"{label} - {first}",
                )
            diff.axhline(0.0, color="C0", lw=0.8)
            diff.set_ylabel(f"loss - {first}'s")
            diff.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            diff.grid(True, alpha=0.3)
            diff.legend(fontsize=8)
        else:
            ax.set_title(title, fontsize=10)
        axes[-1][0].set_xlabel("step")
