"""The training lab's plot: the loss of every step, one line per mode (and PyTorch DDP's)."""

from pathlib import Path

from playground.display.plot import figure


def plot_losses(curves: dict[str, list[float]], path: Path, title: str) -> None:
    """Loss against step; the modes start from the same weights and see the same batches, so their
    lines lie on top of each other (to rounding): that is the point."""
    with figure(path, (8, 4.5)) as (_, ax):
        for i, (label, losses) in enumerate(curves.items()):
            style = "--" if label.startswith("torch") else "-"
            ax.plot(range(len(losses)), losses, style, color=f"C{i}", lw=1.4, label=label)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (cross-entropy per byte, nats)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
