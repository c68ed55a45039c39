"""All-reduce measured like nccl-tests: per size, warm-up, timed iterations, a correctness check.

Every rank fills its input with a closed-form integer pattern, so every partial sum is exact in
every dtype and the expected result can be computed on each rank without any communication.
`wrong` counts elements that differ from it; nccl-tests' #wrong column.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.collectives import ALLREDUCE_ALGORITHMS, DEFAULT_SEGMENT_BYTES, ReduceOp, allreduce
from playground.report import Report, Table
from playground.sizes import Size, format_size
from playground.trace import CAT_OP, now_us

DTYPES = ("float32", "float64", "int32", "int64")


@dataclass(frozen=True)
class Params:
    algorithm: Literal["ring", "tree"] = "ring"
    sizes: tuple[Size, ...] = (8, 1024, 32768, 1 << 20, 4 << 20)
    dtype: Literal["float32", "float64", "int32", "int64"] = "float32"
    op: Literal["sum", "max", "min"] = "sum"
    iters: int = 10
    warmup: int = 2
    check: bool = True
    segment_bytes: Size = DEFAULT_SEGMENT_BYTES

    def __post_init__(self):
        if not self.sizes:
            raise ValueError("sizes: give at least one size")
        if self.iters < 1:
            raise ValueError(f"iters: must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ValueError(f"warmup: must be >= 0, got {self.warmup}")
        if self.segment_bytes < 1:
            raise ValueError(f"segment_bytes: must be >= 1, got {self.segment_bytes}")


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each link carries relative to algbw."""
    if n <= 1:
        return 0.0 if collective in ("allreduce", "allgather", "reduce_scatter") else 1.0
    return {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reduce_scatter": (n - 1) / n}.get(collective, 1.0)


def pattern(rank: int, count: int, dtype: str) -> np.ndarray:
    """Rank `rank`'s input: small integers, so sums over up to 64 ranks are exact in every dtype."""
    i = np.arange(count, dtype=np.int64)
    return (((7 * i + 13 * rank) % 17) - 8).astype(dtype)


def expected_result(size: int, count: int, dtype: str, op: ReduceOp) -> np.ndarray:
    acc = pattern(0, count, "int64")
    for r in range(1, size):
        op.ufunc(acc, pattern(r, count, "int64"), out=acc)
    return acc.astype(dtype)


def measure_size(comm, p: Params, size_bytes: int) -> dict:
    itemsize = np.dtype(p.dtype).itemsize
    count = size_bytes // itemsize
    op = ReduceOp.parse(p.op)
    x = pattern(comm.rank, count, p.dtype)
    for _ in range(p.warmup):
        allreduce(comm, x, op, p.algorithm, p.segment_bytes)
    times_us = []
    out = x
    for it in range(p.iters):
        comm.barrier()
        t0 = now_us()
        out = allreduce(comm, x, op, p.algorithm, p.segment_bytes)
        dur = now_us() - t0
        times_us.append(dur)
        comm.tracer.add("allreduce", CAT_OP, t0, dur, {"bytes": count * itemsize, "iter": it,
                                                        "algorithm": p.algorithm})
    comm.tracer.flush()
    wrong = int(np.count_nonzero(out != expected_result(comm.size, count, p.dtype, op))) if p.check else -1
    return {"size": count * itemsize, "count": count, "median_us": float(np.median(times_us)),
            "mean_us": float(np.mean(times_us)), "min_us": float(np.min(times_us)), "wrong": wrong}


def main(comm, params: Params) -> dict:
    rows = []
    for k, size in enumerate(params.sizes):
        comm.progress(k, len(params.sizes), format_size(size))
        rows.append(measure_size(comm, params, size))
    comm.progress(len(params.sizes), len(params.sizes), "done")
    return {"rows": rows, "ok": all(r["wrong"] <= 0 for r in rows)}


COLUMNS = {"size": "size (B)", "count": "count", "dtype": "type", "op": "redop", "algorithm": "algo",
           "time_us": "time (us)", "algbw_gbps": "algbw (GB/s)", "busbw_gbps": "busbw (GB/s)", "wrong": "#wrong"}


def combine_rows(results: list[dict], params: Params, n: int, collective: str = "allreduce") -> list[dict]:
    """One row per size: the slowest rank's median time (the op ends when the last rank ends)."""
    rows = []
    for k, base in enumerate(results[0]["rows"]):
        per_rank = [res["rows"][k] for res in results]
        t_us = max(r["median_us"] for r in per_rank)
        algbw = base["size"] / (t_us * 1e-6) / 1e9 if t_us > 0 else 0.0
        wrong = sum(max(0, r["wrong"]) for r in per_rank) if params.check else -1
        rows.append({"size": base["size"], "count": base["count"], "dtype": params.dtype, "op": params.op,
                     "algorithm": params.algorithm, "time_us": round(t_us, 2), "algbw_gbps": round(algbw, 4),
                     "busbw_gbps": round(algbw * busbw_factor(collective, n), 4), "wrong": wrong})
    return rows


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    n = len(results)
    rows = combine_rows(results, params, n)
    failures = [f"{r['wrong']} wrong elements at size {r['size']} ({params.algorithm})" for r in rows if r["wrong"] > 0]
    title = (f"all-reduce {params.algorithm}, {n} ranks, {params.dtype} {params.op}: median of {params.iters} "
             f"iterations after {params.warmup} warm-up (busbw = algbw x 2(N-1)/N)")
    return Report(ok=not failures, tables=[Table(title, rows, COLUMNS)], failures=failures,
                  data={"algorithm": params.algorithm, "collective": "allreduce"})


def check_scenario(params: Params, ranks: int) -> None:
    if params.algorithm not in ALLREDUCE_ALGORITHMS:
        raise ValueError(f"key 'params.algorithm': expected one of {', '.join(ALLREDUCE_ALGORITHMS)}")
