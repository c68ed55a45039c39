"""Strided reads (seed §1.5): reading fewer elements does not save time until it saves lines.

One rank reads every stride-th float32 of an array larger than the last-level cache with 8
independent accumulators (_playground_native.strided_sum). While stride * 4 B is within one
cache line, every line is still fetched, so the time per pass barely moves; past a line, the
lines touched halve with each doubling and so, roughly, does the time.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.config.node import NodeContract, Ranks
from playground.core import machine
from playground.core.errors import ParamError
from playground.core.native import load_native
from playground.core.sizes import Size
from playground.display.report import Report
from playground.memlab import stride_report
from playground.memlab.strides import EXACT_FLOAT_SUM, lines_touched


@dataclass(frozen=True)
class Params:
    # the float32 array read (a multiple of 4); larger than the last-level cache, or lines stay cached
    array_bytes: Size = 128 * 1024 * 1024
    # in float32 elements: 1 reads every element, 16 one per 64-byte line
    strides: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    repeats: int = 5  # timed passes per stride
    statistic: Literal["min", "median"] = "min"  # which of the repeats' times is shown

    def __post_init__(self):
        if self.array_bytes < 4096 or self.array_bytes % 4:
            raise ParamError("array_bytes", f"a multiple of 4 and >= 4 KiB, got {self.array_bytes}")
        if not self.strides or any(s < 1 for s in self.strides):
            raise ParamError("strides", f"each must be >= 1 element, got {list(self.strides)}")
        if self.repeats < 1:
            raise ParamError("repeats", f"must be >= 1, got {self.repeats}")


def main(comm, params: Params) -> dict:
    native = load_native()
    line = machine.cache_line_bytes()
    n = params.array_bytes // 4
    a = np.ones(n, dtype=np.float32)  # ones: the checksum is the count of elements read
    rows = []
    for k, s in enumerate(params.strides):
        comm.progress(k, len(params.strides), f"stride {s}")
        with comm.tracer.span("stride.pass", cat="compute", stride=s):
            times_ns, checksum = native.strided_sum(a, s, params.repeats)
        t = min(times_ns) if params.statistic == "min" else float(np.median(times_ns))
        elems = len(range(0, n, s))
        lines = lines_touched(n, s, line)
        rows.append(
            {
                "stride_elems": s,
                "stride_bytes": 4 * s,
                "elements_read": elems,
                "lines_touched": lines,
                "ms_per_pass": t / 1e6,
                "ns_per_element": t / elems,
                "line_gb_s": lines * line / t,  # bytes of the lines fetched, per ns = GB/s
                "checksum": checksum,
                "checksum_ok": checksum == elems if elems <= EXACT_FLOAT_SUM else None,
            }
        )
    comm.progress(len(params.strides), len(params.strides), "done")
    base = rows[0]["ms_per_pass"]
    for r in rows:
        r["time_vs_first"] = r["ms_per_pass"] / base
    return {"ok": all(r["checksum_ok"] is not False for r in rows), "rows": rows, "line_bytes": line}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return stride_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "the stride lab measures one core"))
