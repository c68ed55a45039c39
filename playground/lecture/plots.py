"""Plots the lecture page adds where a scenario draws none, with the project's own plot functions.

- overlap: the per-rank timeline of the run (`inspect --plot`), compute beside the all-reduce;
- bench: busbw against size, ring beside tree (`bench`'s plot);
- pingpong: one-way time against size, this machine's points and fit beside the lecture's alpha-beta
  (one plot per ping-pong run: over ZeroMQ, and over shared memory);
- messages: the message diagram (`inspect --diagram`) of its ring and of its tree all-reduce.
Each returns the files it wrote; a plot that cannot be drawn is left out, never fatal.
"""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.plot import plot_busbw, plot_timeline, plot_xy
from playground.lecture.figures import Run
from playground.models.alphabeta import AlphaBeta, fit_alpha_beta


def overlap_timeline(run: Run, out_dir: Path) -> list[Path]:
    from playground.commands.inspect import load_run

    path = out_dir / "overlap-timeline.png"
    plot_timeline(load_run(run.directory()), path)
    return [path]


def ring_vs_tree(run: Run, out_dir: Path) -> list[Path]:
    path = out_dir / "ring-vs-tree-busbw.png"
    result = run.written()
    plot_busbw(result["rows"], path, f"all-reduce, {result['ranks']} ranks")
    return [path]


def alpha_beta(run: Run, out_dir: Path, lecture_link: AlphaBeta | None) -> list[Path]:
    result = run.written()
    rows = result["rows"]
    sizes = [r["size"] for r in rows]
    fit = fit_alpha_beta(sizes, [r["ours_us"] * 1e-6 for r in rows])
    over = result.get("transport", "")
    series = {
        f"this machine over {over}, measured": [r["ours_us"] for r in rows],
        f"this machine, fit (alpha {fit.alpha_s * 1e6:.3g} us, beta {fit.beta_bytes_per_s / 1e9:.2f} GB/s)": [
            fit.message_time_s(n) * 1e6 for n in sizes
        ],
    }
    if lecture_link is not None:
        label = (
            f"lecture 5.2 (alpha {lecture_link.alpha_s * 1e6:g} us, "
            f"beta {lecture_link.beta_bytes_per_s / 1e9:g} GB/s)"
        )
        series[label] = [lecture_link.message_time_s(n) * 1e6 for n in sizes]
    path = out_dir / ("alpha-beta.png" if run.name == "pingpong" else f"alpha-beta-{run.name}.png")
    plot_xy(
        [format_size(n) for n in sizes],
        series,
        path,
        title=f"one-way message time over {over}: this machine vs the lecture's",
        xlabel="message size",
        ylabel="one-way time (us, log scale)",
        logy=True,
    )
    return [path]


_DIAGRAM_SENTENCES = {
    "ring": "Ring all-reduce of {size} on N = {n} ranks: {messages} messages in {depth} steps, "
    "2(N-1) = {ring_steps}; at every step each rank passes one N-th of the data to its right "
    "neighbour, reducing it in the first N-1 steps and copying it in the last N-1.",
    "tree": "Binomial-tree all-reduce of {size} on N = {n} ranks: {messages} messages in {depth} "
    "steps, 2 log2 N = {tree_steps}; the whole buffer is reduced up the tree to rank 0, then "
    "broadcast back down, so fewer steps than the ring, each carrying all {size}.",
}


def message_diagrams(run: Run, out_dir: Path) -> dict[Path, str]:
    """The diagram of each algorithm's call in the run, inside its timed operation only, with one
    sentence that counts its messages and steps against the algorithm's closed form."""
    from playground.diagram import draw_diagram

    result, run_dir = run.written(), run.directory()
    n = result["ranks"]
    out = {}
    for row in result["rows"]:
        algo, size = row["algorithm"], format_size(row["size"])
        info = draw_diagram(
            run_dir,
            out_dir / f"{algo}-diagram.svg",
            ops=algo,
            title=f"{algo} all-reduce of {size}, {n} ranks",
        )
        sentence = _DIAGRAM_SENTENCES.get(algo, "{algo}: {messages} messages in {depth} steps.")
        out[info.path] = sentence.format(
            algo=algo,
            size=size,
            n=n,
            messages=info.num_drawn,
            depth=info.depth,
            ring_steps=2 * (n - 1),
            tree_steps=2 * max(n - 1, 0).bit_length(),
        )
    return out
