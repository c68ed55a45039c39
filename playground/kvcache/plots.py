"""Both KV-cache labs' plot: memory in use and admitted sequences over time, per policy."""

from pathlib import Path

import numpy as np

from playground.display.plot import figure


def plot_memory(per_policy: list[dict], path: Path, title: str) -> None:
    """Memory in use (allocated and holding tokens) and live sequences over time, one colour a policy."""
    with figure(path, (9, 7), nrows=2) as (_, (ax_mem, ax_seq)):
        for i, pol in enumerate(per_policy):
            if not pol["samples"]:
                continue
            s = np.asarray(pol["samples"], dtype=float)
            cap = pol["stats"]["capacity_slots"]
            color = f"C{i}"
            ax_mem.plot(s[:, 0], 100 * s[:, 3] / cap, color=color, label=f"{pol['policy']}: allocated")
            ax_mem.plot(
                s[:, 0],
                100 * s[:, 2] / cap,
                color=color,
                linestyle="--",
                label=f"{pol['policy']}: holding tokens",
            )
            ax_seq.plot(s[:, 0], s[:, 1], color=color, label=pol["policy"])
        ax_mem.set_ylabel("% of KV capacity")
        ax_mem.set_title(title)
        ax_mem.set_ylim(0, 105)
        ax_mem.legend(fontsize=8, loc="lower right")
        ax_seq.set_ylabel("admitted sequences")
        ax_seq.set_xlabel("time since the policy's start (s)")
        ax_seq.legend(fontsize=8)
