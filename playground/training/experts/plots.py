"""The expert-parallel run's plot: each workload's step split into its phases, one bar per workload and
permutation, the model's step marked beside each bar."""

import textwrap
from pathlib import Path

from playground.display.plot import figure

PARTS = (  # the step's split, bottom to top
    ("router_ms", "router"),
    ("permute_ms", "permute"),
    ("alltoall_ms", "all-to-all"),
    ("experts_ms", "experts"),
    ("unpermute_ms", "un-permute"),
    ("rest_ms", "rest"),
)


def plot_split(path: Path, rows: list[dict], title: str) -> None:
    """Stacked bars of the step's phases per run (`moe_report.step_row`), the model as a black tick."""
    labels = [f"{r['workload']}\n{r['permute']}" for r in rows]
    with figure(path, (max(6.0, 1.1 * len(rows) + 2), 4.8)) as (fig, ax):
        bottom = [0.0] * len(rows)
        for i, (key, name) in enumerate(PARTS):
            heights = [max(0.0, r[key]) for r in rows]
            ax.bar(range(len(rows)), heights, 0.6, bottom=bottom, label=name, color=f"C{i}")
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.scatter(range(len(rows)), [r["model_ms"] for r in rows], marker="_", s=600, color="black", zorder=3,
                   label="model")  # fmt: skip
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_ylabel("step (ms), slowest rank")
        ax.set_ylim(bottom=0)
        ax.set_title(textwrap.fill(title, 100), fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
