"""Where the bandwidth-optimal algorithm overtakes the latency-optimal ones: the ring all-reduce the
tree, halving-doubling and recursive doubling; the pairwise all-to-all exchange Bruck's.

The ring moves the fewest bytes per rank (2(N-1)/N S) but takes 2(N-1) latency steps; the tree
takes 2 log2 N steps but moves the whole buffer at each. So for each N there is a size S* above
which the ring wins, and S* grows with N (about (N - log2 N) alpha beta / log2 N): at 1024 ranks on
the lecture's InfiniBand it is tens of megabytes. That is why NCCL switches to a tree for small
messages at large scale. Likewise the pairwise exchange sends each block once in N-1 messages and
Bruck's algorithm log2 N messages of half the data: MPICH's switch from Bruck for short all-to-alls.
The table gives, per rank count, the first simulated size from which the reference stays ahead,
beside the model's exact S*.
"""

from pathlib import Path

from playground.collectives.registry import flat_allreduce
from playground.core.sizes import format_size
from playground.display.report import Table
from playground.sim import model

# Per collective: the algorithm whose crossover is sought, and what it is compared with.
CONTENDERS = {
    "allreduce": ("ring", tuple(a for a in flat_allreduce() if a != "ring")),
    "alltoall": ("pairwise", ("bruck",)),
}
OTHERS = CONTENDERS["allreduce"][1]  # what the ring is compared with


def contenders(spec) -> tuple[str, list[str]]:
    """(reference, the others in `spec`'s algorithms): nothing to compare without the reference."""
    reference, others = CONTENDERS.get(spec.collective, ("", ()))
    if reference not in spec.algorithms:
        return reference, []
    return reference, [a for a in others if a in spec.algorithms]


def search(sweep, spec) -> dict[tuple[int, str], int | None]:
    """For each rank count and each of tree/hd/rd (all-to-all: Bruck), the first swept size from
    which the ring (pairwise) is faster. The search starts at the size the model predicts and walks outwards until the
    simulated winner changes: two or three simulated points per pair when the model is right
    (exactly so on uniform links), more when a topology makes it approximate; the whole grid is
    never run (a ring of 1024 ranks costs as much to simulate at 8 B as at 1 GiB)."""
    out = {}
    sizes = list(spec.sizes)
    last = len(sizes) - 1
    reference, others = contenders(spec)
    for n in spec.ranks:
        for other in others:

            def ring_wins(i: int, n=n, other=other) -> bool:
                ours, theirs = sweep.row(n, reference, sizes[i]), sweep.row(n, other, sizes[i])
                return ours["time_us"] < theirs["time_us"]

            s_star = model.crossover_bytes(spec, n, other, reference)
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
    reference, others = contenders(spec)
    out, columns = [], {"ranks": "ranks"}
    for other in others:
        columns[f"sim_{other}"] = f"{reference} beats {other} from (sim)"
        columns[f"model_{other}"] = "(model S*)"
    for n in spec.ranks:
        row = {"ranks": n}
        for other in others:
            won = crossovers.get((n, other))
            s_star = model.crossover_bytes(spec, n, other, reference)
            row[f"sim_{other}"] = format_size(won) if won is not None else "not in sweep"
            row[f"model_{other}"] = "never" if s_star is None else format_size(round(s_star))
            row[f"sim_{other}_bytes"], row[f"model_{other}_bytes"] = won, s_star
        out.append(row)
    what = {"ring": "the ring all-reduce is fastest", "pairwise": "the pairwise all-to-all beats Bruck's"}
    return Table(
        f"crossover: the size above which {what.get(reference, reference)} ({spec.link_source})", out, columns
    )


def plot_crossover(spec, rows: list[dict], path: Path) -> str:
    from playground.display.plot import figure

    reference, others = contenders(spec)
    with figure(path, (7.5, 4.5)) as (_, ax):
        for k, other in enumerate(a for a in others if f"model_{a}_bytes" in (rows[0] if rows else {})):
            color = f"C{k}"
            modelled = [(r["ranks"], r[f"model_{other}_bytes"]) for r in rows if r[f"model_{other}_bytes"]]
            if modelled:
                ax.plot(
                    *zip(*modelled, strict=True), "-", color=color, label=f"{reference} vs {other}: model"
                )
            sim = [(r["ranks"], r[f"sim_{other}_bytes"]) for r in rows if r[f"sim_{other}_bytes"]]
            if sim:
                ax.plot(*zip(*sim, strict=True), "o", color=color, label=f"{reference} vs {other}: simulated")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel(f"size where {reference} starts to win (bytes)")
        ax.set_title(spec.link_source, fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    return path.name
