"""The stride lab's report: time per pass and lines touched per stride, the checksum check
(every element read, counted by summing ones) and the plot of both against stride."""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.plot import plot_xy
from playground.display.report import Report, Table


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    rows = res["rows"]
    failures = [
        f"stride {r['stride_elems']}: checksum {r['checksum']} != {r['elements_read']} elements read"
        for r in rows
        if r["checksum_ok"] is False
    ]
    strides = [r["stride_elems"] for r in rows]
    plot_xy(
        strides,
        {
            "ms per pass": [r["ms_per_pass"] for r in rows],
            "lines touched (millions)": [r["lines_touched"] / 1e6 for r in rows],
        },
        run_dir / "stride.png",
        title=f"strided read of {format_size(params.array_bytes)} float32",
        xlabel="stride (elements)",
        ylabel="ms per pass / million lines",
        logx=True,
        logy=True,
    )
    line = res["line_bytes"]
    return Report(
        ok=not failures,
        tables=[
            Table(
                "strided read",
                rows,
                {
                    "stride_elems": "stride",
                    "stride_bytes": "bytes",
                    "elements_read": "elements",
                    "lines_touched": "lines",
                    "ms_per_pass": "ms/pass",
                    "time_vs_first": "x stride 1",
                    "ns_per_element": "ns/elem",
                    "line_gb_s": "GB/s of lines",
                    "checksum_ok": "sum ok",
                },
                legend={
                    "time_vs_first": "this stride's time per pass / stride 1's",
                    "line_gb_s": "the bytes of the cache lines fetched per second (lines x line size / time)",
                },
            )
        ],
        notes=[
            f"cache line {line} B: strides up to {line // 4} elements touch every line; "
            f"8 independent accumulators, {params.statistic} of {params.repeats} passes"
        ],
        failures=failures,
        files=["stride.png"],
    )
