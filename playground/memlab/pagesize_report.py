"""The page-size lab's report: waste against page-table size per page size, the plot, and the
exercise 9 check (700 tokens at 16 and 256 tokens a page)."""

from pathlib import Path

from playground.display.plot import plot_xy
from playground.display.report import Report, Table


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    rows = res["rows"]
    failures = [
        f"exercise 9, page {c['page']}: got {c['pages']} pages / {c['waste']} wasted, seed says {c['seed_says']}"
        for c in res["exercise_9"]
        if not c["ok"]
    ]
    pages = [r["page_units"] for r in rows]
    plot_xy(
        pages,
        {
            "internal waste %": [r["waste_pct"] for r in rows],
            "page-table entries / 100": [r["pages"] / 100 for r in rows],
        },
        run_dir / "pagesize.png",
        title=f"page size trade-off, {params.num_blocks} blocks",
        xlabel="page size (units)",
        ylabel="% / hundreds of entries",
        logx=True,
        logy=True,
    )
    return Report(
        ok=not failures,
        tables=[
            Table(
                f"page size trade-off: {params.num_blocks} blocks of {params.min_size}-{params.max_size} units",
                rows,
                {
                    "page_units": "page",
                    "pages": "pages (= PT entries)",
                    "waste_units": "wasted units",
                    "waste_pct": "waste %",
                    "half_page_estimate_pct": "model (P-1)/2 %",
                    "page_table_bytes": "PT bytes",
                },
            ),
            Table("exercise 9 (700-token sequence)", res["exercise_9"]),
        ],
        notes=[
            "small pages: little waste, many entries; big pages: the opposite (vLLM picks 16 tokens a page)"
        ],
        failures=failures,
        files=["pagesize.png"],
    )
