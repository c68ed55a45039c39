"""The gather lab's report: sequential vs random gather in C beside np.take, and the checksum
check (a permutation gathers every element exactly once)."""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.plot import plot_xy
from playground.display.report import Report, Table


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    rows = res["rows"]
    failures = [
        f"{r['order']} gather: checksum does not equal the sum of src" for r in rows if not r["checksum_ok"]
    ]
    plot_xy(
        [r["order"] for r in rows],
        {"native C (ms)": [r["ms"] for r in rows], "np.take (ms)": [r["np_take_ms"] for r in rows]},
        run_dir / "gather.png",
        title=f"gather of {format_size(params.src_bytes)} float32",
        xlabel="index order",
        ylabel="ms",
        bars=True,
    )
    return Report(
        ok=not failures,
        tables=[
            Table(
                "gather: out = src.take(idx), in C",
                rows,
                {
                    "order": "indices",
                    "elements": "elements",
                    "ms": "ms (C)",
                    "ns_per_element": "ns/elem",
                    "useful_gb_s": "useful GB/s",
                    "vs_sequential": "x sequential",
                    "np_take_ms": "np.take ms",
                    "checksum_ok": "sum ok",
                },
                legend={
                    "useful_gb_s": "the 4 bytes of each element gathered, per second (not the lines fetched)",
                    "vs_sequential": "this order's time / sequential indices'",
                    "np_take_ms": "the same gather by numpy's np.take, for comparison",
                },
            )
        ],
        notes=[
            f"every element of a {format_size(params.src_bytes)} array gathered once; "
            f"{params.statistic} of {params.repeats}"
        ],
        failures=failures,
        files=["gather.png"],
    )
