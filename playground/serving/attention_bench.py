"""The attention kernel, paged vs contiguous: time per decode token, over a pool larger than the caches.

    python -m playground.serving.attention_bench --contexts 128,512,2048,8192 --block-sizes 8,16,32,64,128,256

For each context c the pool (one layer's key and value planes, `heads x head_dim` floats a slot,
`pool_bytes` in all: larger than the last-level cache, as a server's is) holds sequences of c
tokens, and one call of the kernel attends one decode query of each. The same tokens are laid
out three ways:
- `contiguous`: sequence i is one run of slots; the kernel reads it from start to end;
- `paged in order`: blocks of b slots, each block table listing adjacent blocks: the same memory
  in the same order, read block by block (what the kernel's block loop costs by itself);
- `paged`: the block tables are a random draw of the pool's blocks, as after a server has run a
  while: each block is a jump to somewhere else (what scattering costs: lecture 1.6's gather, in
  runs of `b x heads x head_dim x 4` bytes instead of 4).
Each round calls every layout once, in turn, so that a busy machine slows them alike; a figure is
the median over the rounds of a call's time over its sequences: microseconds per decode token for
one layer, with the min-max beside it.
"""

import time

import numpy as np

from playground.core.argparser import OneLineParser
from playground.display.report import Table, make_console, render_table
from playground.kvcache.engine.attention import KERNELS, RunTable, decode_attention
from playground.transformer.blas import pin_blas_threads


class Pool:
    """One layer's planes holding `num_seqs` sequences of `context` tokens, each with room for
    `padded` slots (a whole number of the largest block)."""

    def __init__(self, context: int, heads: int, head_dim: int, pool_bytes: int, largest_block: int, rng):
        tokens = pool_bytes // (2 * heads * head_dim * 4)
        self.context, self.num_seqs = context, max(1, tokens // context)
        self.padded = -(-context // largest_block) * largest_block
        shape = (self.num_seqs * self.padded, heads, head_dim)
        self.keys = rng.standard_normal(shape, dtype=np.float32)
        self.values = rng.standard_normal(shape, dtype=np.float32)
        self.q = rng.standard_normal((self.num_seqs, heads, head_dim), dtype=np.float32)
        self.rng = rng

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def runs(self, layout: str, block_size: int = 0) -> RunTable:
        lens = np.full(self.num_seqs, self.context, dtype=np.int64)
        if layout == "contiguous":
            starts = np.arange(self.num_seqs + 1, dtype=np.int64)
            return RunTable(np.arange(self.num_seqs, dtype=np.int64) * self.padded, starts, lens, 0)
        per_seq = self.padded // block_size
        blocks = np.arange(self.num_seqs * per_seq, dtype=np.int64)
        if layout == "paged":
            blocks = self.rng.permutation(blocks)
        return RunTable(blocks, np.arange(self.num_seqs + 1, dtype=np.int64) * per_seq, lens, block_size)


def _cases(pool: Pool, block_sizes, kernels) -> list[tuple[str, int, str, int, RunTable]]:
    """(layout, block size, kernel, streams, runs): every layout natively at every block size
    (the kernel's own choice of streams), at block 16 also one block at a time and in numpy."""
    cases = [("contiguous", 0, k, 0, pool.runs("contiguous")) for k in kernels]
    for b in block_sizes:
        cases.append(("paged", b, "native", 0, pool.runs("paged", b)))
        cases.append(("paged in order", b, "native", 0, pool.runs("paged in order", b)))
    if 16 in block_sizes:
        cases.append(("paged", 16, "native", 1, pool.runs("paged", 16)))
        if "numpy" in kernels:
            cases.append(("paged", 16, "numpy", 0, pool.runs("paged", 16)))
    return cases


def sweep(
    contexts,
    block_sizes,
    kernels=KERNELS,
    heads=8,
    head_dim=64,
    pool_bytes=64 << 20,
    rounds=5,
    seed=0,
    on_progress=None,
) -> list[dict]:
    """One row per (context, layout, block size, kernel): us per decode token, median and min-max."""
    rng, rows = np.random.default_rng(seed), []
    for k, context in enumerate(contexts):
        if on_progress:
            on_progress(k, len(contexts), f"attention at context {context}")
        pool = Pool(context, heads, head_dim, pool_bytes, max(block_sizes), rng)
        cases = _cases(pool, block_sizes, kernels)
        times: list[list[float]] = [[] for _ in cases]
        for _ in range(rounds + 1):  # the first round warms up, untimed
            for i, (_, _, kernel, streams, runs) in enumerate(cases):
                t0 = time.perf_counter()
                decode_attention(pool.q, pool.keys, pool.values, runs, kernel, streams)
                times[i].append((time.perf_counter() - t0) / pool.num_seqs * 1e6)
        for (layout, b, kernel, streams, _), ts in zip(cases, times, strict=True):
            ts = ts[1:]
            rows.append(
                {
                    "context": context,
                    "layout": layout + (" (one block at a time)" if streams == 1 else ""),
                    "block_size": b or None,
                    "block_bytes": b * heads * head_dim * 4 or None,
                    "kernel": kernel,
                    "us_per_token": float(np.median(ts)),
                    "min_us": min(ts),
                    "max_us": max(ts),
                    "seqs": pool.num_seqs,
                    "pool_mib": pool.nbytes / 2**20,
                }
            )
        del pool
    return rows


def ratios(rows: list[dict], kernel: str = "native") -> list[dict]:
    """Per context and block size: each paged layout over contiguous, medians."""
    base = {
        r["context"]: r["us_per_token"] for r in rows if r["layout"] == "contiguous" and r["kernel"] == kernel
    }
    names = {
        "paged": "paged_x",
        "paged in order": "in_order_x",
        "paged (one block at a time)": "one_stream_x",
    }
    out: dict[tuple, dict] = {}
    for r in rows:
        if r["layout"] not in names or r["kernel"] != kernel:
            continue
        row = out.setdefault(
            (r["context"], r["block_size"]), {"context": r["context"], "block_size": r["block_size"]}
        )
        row[names[r["layout"]]] = r["us_per_token"] / base[r["context"]]
    return list(out.values())


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = OneLineParser(
        prog="python -m playground.serving.attention_bench", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--contexts", default="128,512,2048,8192", help="tokens per sequence (comma list)")
    ap.add_argument("--block-sizes", default="8,16,32,64,128,256", help="paged block sizes (comma list)")
    ap.add_argument("--kernels", default="native,numpy", help="native (C), numpy")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--pool-mib", type=int, default=64, help="keys and values in the pool, MiB (default 64)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    kernels = [k for k in args.kernels.split(",") if k]
    bad = [k for k in kernels if k not in KERNELS]
    if bad:
        ap.error(f"--kernels: {', '.join(bad)} not in {', '.join(KERNELS)}")
    pin_blas_threads(1)
    rows = sweep(
        _int_list(args.contexts),
        _int_list(args.block_sizes),
        kernels,
        args.heads,
        args.head_dim,
        args.pool_mib << 20,
        args.rounds,
    )
    console = make_console()
    render_table(Table("attention per decode token (one layer), us", rows), console)
    render_table(Table("paged / contiguous (native, medians)", ratios(rows)), console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
