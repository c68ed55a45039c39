"""The attention kernel, paged vs contiguous (docs/serving.md): time per decode token at contexts
128..8192 and block sizes 8..256 over a pool larger than the caches.

One rank times `playground.serving.attention_bench.sweep`: contiguous runs, paged blocks in
memory order, paged blocks scattered as after a server has run a while, each round every layout
once in turn; the native kernel throughout, numpy at block 16 beside it (its gather is the copy
the C kernel does not make).
"""

from dataclasses import dataclass

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.core.sizes import Size
from playground.display.report import Report
from playground.kvcache.engine.attention import KERNELS, Kernel
from playground.serving import attention_bench, attention_report
from playground.transformer.blas import pin_blas_threads


@dataclass(frozen=True)
class Params:
    contexts: tuple[int, ...] = (128, 512, 2048, 8192)  # tokens per sequence
    block_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256)  # paged block sizes
    kernels: tuple[Kernel, ...] = KERNELS  # native (C) always; numpy beside it at block 16
    heads: int = 8  # heads of one layer's keys and values
    head_dim: int = 64  # floats per head
    pool_bytes: Size = 64 * 2**20  # keys and values in the pool, beyond the last-level cache
    rounds: int = 5  # timed rounds, every layout once each, after one warm-up round
    seed: int = 0  # the scattered block tables and the data

    def __post_init__(self):
        for name in ("contexts", "block_sizes"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ParamError(name, f"a non-empty list of integers >= 1, got {list(values)}")
        for name in ("heads", "head_dim", "pool_bytes", "rounds"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        if "native" not in self.kernels:
            raise ParamError(
                "kernels", f"must include native (the figures are its), got {list(self.kernels)}"
            )


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # one core for both kernels (an idle BLAS thread spins on a busy machine)
    rows = attention_bench.sweep(
        params.contexts,
        params.block_sizes,
        params.kernels,
        params.heads,
        params.head_dim,
        params.pool_bytes,
        params.rounds,
        params.seed,
        on_progress=comm.progress,
    )
    return {"ok": True, "rows": rows}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return attention_report.report(results[0]["rows"], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "the attention kernel is timed on one core"))
