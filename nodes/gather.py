"""Sequential vs random gather (seed §1.6): same data, same work, only the index order differs.

out[i] = src[idx[i]] for every element of a float32 array larger than the last-level cache,
once with idx = 0, 1, 2, ... and once with a random permutation, in C
(_playground_native.gather) and with np.take beside it. Sequential indices use every byte of
each line and let the prefetcher run ahead; random ones pay a miss for 4 useful bytes.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.core.native import load_native
from playground.core.sizes import Size
from playground.display.report import Report
from playground.memlab import gather_report


@dataclass(frozen=True)
class Params:
    # the float32 source array (>= 4 KiB, a multiple of 4); keep it above the last-level cache. The
    # run also holds an output as large and int64 indices twice as large
    src_bytes: Size = 64 * 1024 * 1024
    repeats: int = 2  # timed gathers per order, in C and with np.take each
    statistic: Literal["min", "median"] = "min"  # which of the repeats' times is shown
    seed: int = 0  # seed of the random permutation

    def __post_init__(self):
        if self.src_bytes < 4096 or self.src_bytes % 4:
            raise ParamError("src_bytes", f"a multiple of 4 and >= 4 KiB, got {self.src_bytes}")
        if self.repeats < 1:
            raise ParamError("repeats", f"must be >= 1, got {self.repeats}")


def _pick(times_ns: Sequence[float], statistic: str) -> float:
    return min(times_ns) if statistic == "min" else float(np.median(times_ns))


def main(comm, params: Params) -> dict:
    import time

    native = load_native()
    n = params.src_bytes // 4
    src = (np.arange(n, dtype=np.int64) % 1000).astype(np.float32)
    expected = float(src.sum(dtype=np.float64))  # a permutation gathers every element once
    out = np.empty(n, dtype=np.float32)
    rng = np.random.default_rng(params.seed)
    rows = []
    for k, order in enumerate(("sequential", "random")):
        comm.progress(k, 2, f"gather {order}")
        idx = np.arange(n, dtype=np.int64) if order == "sequential" else rng.permutation(n).astype(np.int64)
        with comm.tracer.span("gather.native", cat="compute", order=order):
            times_ns, checksum = native.gather(src, idx, out, params.repeats)
        take_ns = []
        for _ in range(params.repeats):
            t0 = time.perf_counter_ns()
            np.take(src, idx, out=out)
            take_ns.append(time.perf_counter_ns() - t0)
        t, t_take = _pick(times_ns, params.statistic), _pick(take_ns, params.statistic)
        rows.append(
            {
                "order": order,
                "elements": n,
                "ms": t / 1e6,
                "ns_per_element": t / n,
                "useful_gb_s": 4 * n / t,
                "np_take_ms": t_take / 1e6,
                "checksum_ok": checksum == expected,
            }
        )
        del idx
    comm.progress(2, 2, "done")
    rows[1]["vs_sequential"] = rows[1]["ms"] / rows[0]["ms"]
    rows[0]["vs_sequential"] = 1.0
    return {"ok": all(r["checksum_ok"] for r in rows), "rows": rows}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return gather_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "the gather lab measures one core"))
