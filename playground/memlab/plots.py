"""The memory lab's plots (matplotlib set up by `playground.display.plot.figure`)."""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.plot import figure


def _byte_tick(x: float, _pos) -> str:
    return format_size(int(x)).replace(" ", "")


def plot_staircase(
    curves: dict[str, tuple[list[int], list[float]]],
    levels: list,
    cache_sizes: dict[str, int],
    path: Path,
    title: str,
) -> None:
    """Latency per load against working set (both log scale), plateaus and OS cache sizes marked."""
    with figure(path, (9, 5)) as (_, ax):
        for label, (sizes, ns) in curves.items():
            ax.plot(sizes, ns, marker="o", ms=3, label=label)
        for lv in levels:
            ax.hlines(lv.latency_ns, lv.first_bytes, lv.last_bytes, colors="black", linewidth=3, alpha=0.4)
            ax.annotate(
                f"{lv.name} {lv.latency_ns:.1f} ns",
                (lv.first_bytes, lv.latency_ns),
                textcoords="offset points",
                xytext=(0, 6),
                fontsize=8,
            )
        for name, size in cache_sizes.items():
            ax.axvline(size, color="gray", linestyle=":", linewidth=1)
            ax.text(
                size,
                0.02,
                f" OS {name} {format_size(size)}",
                rotation=90,
                fontsize=7,
                color="gray",
                transform=ax.get_xaxis_transform(),
                ha="right",
                va="bottom",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(_byte_tick)
        ax.set_xlabel("working set")
        ax.set_ylabel("ns per load")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
