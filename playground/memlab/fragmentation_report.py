"""The fragmentation lab's report: contiguous first fit against paging on one workload, its
first failures, and the check that paging never fails for want of a hole."""

from pathlib import Path

from playground.display.report import Report, Table


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    failures = [] if res["ok"] else ["paged allocation failed with enough free pages (a bug)"]
    return Report(
        ok=not failures,
        tables=[
            Table(
                f"contiguous vs paged: capacity {params.capacity}, {params.num_steps} steps, "
                f"sizes {params.min_size}-{params.max_size}",
                res["rows"],
                {
                    "policy": "policy",
                    "requests": "alloc requests",
                    "failures": "failures",
                    "external_frag_failures": "external frag",
                    "out_of_space_failures": "out of space",
                    "mean_used_pct": "mean used %",
                    "internal_frag_pct": "internal frag %",
                },
            ),
            Table("first failures", res["examples"]),
        ],
        notes=[
            "external fragmentation: the free units add up to the request but no single hole holds it",
            f"internal fragmentation: unused units in each block's last page (about half of {params.page_units})",
        ],
        failures=failures,
    )
