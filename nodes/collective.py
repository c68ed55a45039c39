"""Collectives measured like nccl-tests: per size, warm-up, timed iterations, a correctness check.

Every rank fills its input with a closed-form integer pattern (playground.collectives.check), so
every partial sum is exact in every dtype and each rank checks its own result without
communicating; `wrong` counts the elements that differ, nccl-tests' #wrong column. The check runs on
the last timed iteration of every size (a sampled one: the timed loop itself stays clean).
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.collectives import ALGORITHMS, ReduceOp, run_collective
from playground.collectives.auto import choose_allreduce
from playground.collectives.check import busbw_factor, count_wrong, expected_output, input_count, pattern
from playground.errors import ParamError
from playground.report import Report, Table
from playground.sizes import Size, format_size
from playground.trace import CAT_OP, now_us

Collective = Literal["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"]
Algorithm = Literal["ring", "tree", "hd", "rd", "auto"]


@dataclass(frozen=True)
class Params:
    collective: Collective = "allreduce"
    algorithm: tuple[Algorithm, ...] = ("ring",)
    sizes: tuple[Size, ...] = (8, 1024, 32768, 1 << 20, 4 << 20)
    dtype: Literal["float32", "float64", "int32", "int64"] = "float32"
    op: Literal["sum", "max", "min"] = "sum"
    iters: int = 10
    warmup: int = 2
    check: bool = True
    segment_bytes: Size | None = None  # None: the transport's preferred segment (1 MiB ZeroMQ, 4 MiB shm)
    inplace: bool = False  # also measure in place (result into the input), nccl-tests' second column set

    def __post_init__(self):
        if not self.sizes:
            raise ParamError("sizes", "give at least one size")
        if not self.algorithm:
            raise ParamError("algorithm", "give at least one algorithm")
        if self.iters < 1:
            raise ParamError("iters", f"must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")
        if self.segment_bytes is not None and self.segment_bytes < 1:
            raise ParamError("segment_bytes", f"must be >= 1, got {self.segment_bytes}")
        if self.inplace and self.collective != "allreduce":
            raise ParamError("inplace", f"only allreduce works in place, not {self.collective}")
        offered = ALGORITHMS[self.collective]
        for algo in self.algorithm:
            if algo not in offered and algo != "auto":
                raise ParamError("algorithm", f"{self.collective} offers {', '.join(offered)}, got {algo!r}")


def measure(comm, p: Params, algorithm: str, size_bytes: int, inplace: bool = False) -> dict:
    itemsize = np.dtype(p.dtype).itemsize
    count = input_count(p.collective, size_bytes, itemsize, comm.size)
    op = ReduceOp.parse(p.op)
    x = pattern(comm.rank, count, p.dtype)
    work = x.copy() if inplace else x  # in place: refilled with the input (untimed) before each call
    for _ in range(p.warmup):
        if inplace:
            np.copyto(work, x)
        run_collective(comm, p.collective, work, op, algorithm, p.segment_bytes, inplace)
    times_us, out = [], None
    for it in range(p.iters):
        if inplace:
            np.copyto(work, x)
        comm.barrier()
        t0 = now_us()
        out = run_collective(comm, p.collective, work, op, algorithm, p.segment_bytes, inplace)
        dur = now_us() - t0
        times_us.append(dur)
        comm.tracer.add(
            p.collective,
            CAT_OP,
            t0,
            dur,
            {"bytes": count * itemsize, "iter": it, "algorithm": algorithm, "inplace": inplace},
        )
    comm.tracer.flush()
    wrong = (
        count_wrong(out, expected_output(p.collective, comm.rank, comm.size, count, p.dtype, op))
        if p.check
        else -1
    )
    total = count * comm.size if p.collective == "allgather" else count
    chosen = (
        choose_allreduce(count * itemsize, comm.size)
        if algorithm == "auto" and p.collective == "allreduce"
        else ""
    )
    return {
        "size": total * itemsize,
        "count": total,
        "algorithm": algorithm + (f"->{chosen}" if chosen else ""),
        "median_us": float(np.median(times_us)),
        "mean_us": float(np.mean(times_us)),
        "min_us": float(np.min(times_us)),
        "wrong": wrong,
    }


def main(comm, params: Params) -> dict:
    rows = []
    todo = [(a, s) for a in params.algorithm for s in params.sizes]
    for k, (algorithm, size) in enumerate(todo):
        comm.progress(k, len(todo), f"{algorithm} {format_size(size)}")
        row = measure(comm, params, algorithm, size)
        if params.inplace:
            ip = measure(comm, params, algorithm, size, inplace=True)
            row.update(ip_median_us=ip["median_us"], ip_wrong=ip["wrong"])
        rows.append(row)
    comm.progress(len(todo), len(todo), "done")
    return {"rows": rows, "ok": all(r["wrong"] <= 0 for r in rows)}


COLUMNS = {
    "size": "size (B)",
    "count": "count",
    "dtype": "type",
    "op": "redop",
    "algorithm": "algo",
    "time_us": "time (us)",
    "algbw_gbps": "algbw (GB/s)",
    "busbw_gbps": "busbw (GB/s)",
    "wrong": "#wrong",
}
IN_PLACE_COLUMNS = {
    "ip_time_us": "in-place time (us)",
    "ip_algbw_gbps": "algbw",
    "ip_busbw_gbps": "busbw",
    "ip_wrong": "#wrong",
}


def combine_rows(results: list[dict], params: Params) -> list[dict]:
    """One row per (algorithm, size): the slowest rank's median (the op ends when the last rank does);
    with in-place measurements, their columns (prefix ip_) in the same row, as nccl-tests prints."""
    factor = busbw_factor(params.collective, len(results))
    op = params.op if params.collective in ("allreduce", "reduce_scatter", "reduce") else "none"
    rows = []
    for k, base in enumerate(results[0]["rows"]):
        per_rank = [res["rows"][k] for res in results]
        row = {
            "size": base["size"],
            "count": base["count"],
            "dtype": params.dtype,
            "op": op,
            "algorithm": base["algorithm"],
        }
        row.update(_slowest(per_rank, "", base["size"], factor, params.check))
        if "ip_median_us" in base:
            row.update(_slowest(per_rank, "ip_", base["size"], factor, params.check))
        rows.append(row)
    return rows


def _slowest(per_rank: list[dict], prefix: str, size: int, factor: float, checked: bool) -> dict:
    t_us = max(r[prefix + "median_us"] for r in per_rank)
    algbw = size / (t_us * 1e-6) / 1e9 if t_us > 0 else 0.0
    return {
        prefix + "time_us": round(t_us, 2),
        prefix + "algbw_gbps": round(algbw, 6),
        prefix + "busbw_gbps": round(algbw * factor, 6),
        prefix + "wrong": sum(max(0, r[prefix + "wrong"]) for r in per_rank) if checked else -1,
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    n = len(results)
    rows = combine_rows(results, params)
    failures = [
        f"{r[key]} wrong elements: {params.collective} {r['algorithm']}{place} size {r['size']}"
        for r in rows
        for key, place in (("wrong", ""), ("ip_wrong", " in place"))
        if r.get(key, 0) > 0
    ]
    factor = {"allreduce": "2(N-1)/N", "allgather": "(N-1)/N", "reduce_scatter": "(N-1)/N"}.get(
        params.collective, "1"
    )
    title = (
        f"{params.collective}, {n} ranks, {params.dtype}: median of {params.iters} iterations after "
        f"{params.warmup} warm-up; slowest rank; busbw = algbw x {factor}"
    )
    columns = {**COLUMNS, **IN_PLACE_COLUMNS} if params.inplace else COLUMNS
    return Report(
        ok=not failures,
        tables=[Table(title, rows, columns)],
        failures=failures,
        notes=closing_lines(rows, params.check),
        data={"collective": params.collective, "algorithms": list(params.algorithm)},
    )


def closing_lines(rows: list[dict], checked: bool) -> list[str]:
    """nccl-tests' last lines: wrong values overall, and the average busbw (here per algorithm)."""
    wrong = sum(max(0, r["wrong"]) + max(0, r.get("ip_wrong", 0)) for r in rows)
    lines = [
        f"wrong values: {wrong} {'OK' if wrong == 0 else 'FAILED'}"
        if checked
        else "wrong values: not checked"
    ]
    by_algo: dict[str, list[float]] = {}
    for r in rows:
        by_algo.setdefault(r["algorithm"].split("->")[0], []).append(r["busbw_gbps"])
    lines.append("avg busbw (GB/s): " + ", ".join(f"{a} {sum(v) / len(v):.3g}" for a, v in by_algo.items()))
    return lines
