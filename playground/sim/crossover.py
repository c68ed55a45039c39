"""Where the ring all-reduce overtakes the tree, halving-doubling and recursive doubling.

The ring moves the fewest bytes per rank (2(N-1)/N S) but takes 2(N-1) latency steps; the tree
takes 2 log2 N steps but moves the whole buffer at each. So for each N there is a size S* above
which the ring wins, and S* grows with N (about (N - log2 N) alpha beta / log2 N): at 1024 ranks on
the lecture's InfiniBand it is tens of megabytes. That is why NCCL switches to a tree for small
messages at large scale. The table gives, per rank count, the first simulated size from which the
ring stays ahead, beside the model's exact S*.
"""

from pathlib import Path

from playground.collectives.registry import flat_allreduce
from playground.core.sizes import format_size
from playground.display.report import Table
from playground.sim import model

OTHERS = tuple(a for a in flat_allreduce() if a != "ring")  # what the ring is compared with


def search(sweep, spec) -> dict[tuple[int, str], int | None]:
    """For each rank count and each of tree/hd/rd, the first swept size from which the ring is
    faster. The search starts at the size the model predicts and walks outwards until the
    simulated winner changes: two or three simulated points per pair when the model is right
    (exactly so on uniform links), more when a topology makes it approximate; the whole grid is
    never run (a ring of 1024 ranks costs as much to simulate at 8 B as at 1 GiB)."""
    out = {}
    sizes = list(spec.sizes)
    last = len(sizes) - 1
    for n in spec.ranks:
        for other in (a for a in OTHERS if a in spec.algorithms and "ring" in spec.algorithms):

            def ring_wins(i: int, n=n, other=other) -> bool:
                return sweep.row(n, "ring", sizes[i])["time_us"] < sweep.row(n, other, sizes[i])["time_us"]

            s_star = model.crossover_bytes(spec, n, other)
            i = last if s_star is None else next((k for k, s in enumerate(sizes) if s >= s_star), last)
            if ring_wins(i):
                while i > 0 and ring_wins(i - 1):
                    i -= 1
                out[(n, other)] = sizes[i]
            else:
                while i < last and not ring_wins(i + 1):
                    i += 1
                out[(n, other)] = sizes[i + 1] if i < last else None
    return out


def crossover_table(spec, crossovers: dict) -> Table:
    others = [a for a in OTHERS if a in spec.algorithms] if "ring" in spec.algorithms else []
    out, columns = [], {"ranks": "ranks"}
    for other in others:
        columns[f"sim_{other}"] = f"ring beats {other} from (sim)"
        columns[f"model_{other}"] = "(model S*)"
    for n in spec.ranks:
        row = {"ranks": n}
        for other in others:
            won = crossovers.get((n, other))
            s_star = model.crossover_bytes(spec, n, other)
            row[f"sim_{other}"] = format_size(won) if won is not None else "not in sweep"
            row[f"model_{other}"] = "never" if s_star is None else format_size(round(s_star))
            row[f"sim_{other}_bytes"], row[f"model_{other}_bytes"] = won, s_star
        out.append(row)
    return Table(
        f"crossover: the size above which the ring all-reduce is fastest ({spec.link_source})", out, columns
    )


def plot_crossover(spec, rows: list[dict], path: Path) -> str:
    from playground.display.plot import figure

    with figure(path, (7.5, 4.5)) as (_, ax):
        for k, other in enumerate(a for a in OTHERS if f"model_{a}_bytes" in (rows[0] if rows else {})):
            color = f"C{k}"
            modelled = [(r["ranks"], r[f"model_{other}_bytes"]) for r in rows if r[f"model_{other}_bytes"]]
            if modelled:
                ax.plot(*zip(*modelled, strict=True), "-", color=color, label=f"ring vs {other}: model")
            sim = [(r["ranks"], r[f"sim_{other}_bytes"]) for r in rows if r[f"sim_{other}_bytes"]]
            if sim:
                ax.plot(*zip(*sim, strict=True), "o", color=color, label=f"ring vs {other}: simulated")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel("size where the ring starts to win (bytes)")
        ax.set_title(spec.link_source, fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    return path.name
