"""The paging lab's report and its checks: each RSS step must grow by the bytes touched, and
a forked child's private memory by the pages it wrote (give or take allocator noise); the parent
must not see the child's writes."""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.plot import plot_xy
from playground.display.report import Report, Table

MIB = 1024 * 1024
SLACK_BYTES = 4 * MIB  # allocator and interpreter noise allowed around each RSS delta


def check_steps(rows: list[dict]) -> list[str]:
    """Each RSS delta must be the bytes touched (give or take SLACK_BYTES + 5%)."""
    failures = []
    for r in rows:
        want, got = r["touched_bytes"], r["rss_delta_bytes"]
        if abs(got - want) > SLACK_BYTES + 0.05 * want:
            failures.append(
                f"{r['pages']} '{r['step']}': RSS grew {format_size(max(got, 0))}, "
                f"expected about {format_size(want)}"
            )
    return failures


def check_cow(cow: dict, write_bytes: int) -> list[str]:
    failures = []
    delta = cow["child_uss_delta_bytes"]
    if abs(delta - write_bytes) > SLACK_BYTES + 0.05 * write_bytes:
        failures.append(
            f"copy-on-write: child's private memory grew {format_size(max(delta, 0))}, "
            f"expected about {format_size(write_bytes)}"
        )
    if not cow["parent_unchanged"]:
        failures.append("copy-on-write: the parent saw the child's writes")
    return failures


STEP_COLUMNS = {
    "pages": "pages",
    "step": "step",
    "touched_mib": "touched MiB",
    "rss_mib": "RSS MiB",
    "rss_delta_mib": "RSS delta MiB",
    "minor_faults": "minor faults",
    "faults_if_4k": "4 KiB pages touched",
    "us_per_fault": "us/fault",
}
COW_COLUMNS = {
    "array": "parent array",
    "child_wrote": "child wrote",
    "uss_before_mib": "USS before MiB",
    "uss_after_mib": "USS after MiB",
    "uss_delta_mib": "USS delta MiB",
    "expected_mib": "pages x 4 KiB",
    "minor_faults": "minor faults",
    "us_per_fault": "us/fault",
    "parent_unchanged": "parent unchanged",
}


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    rows, cow, write_bytes, page = res["rows"], res["cow"], res["cow_write_bytes"], res["page_bytes"]
    for r in rows:
        r["touched_mib"] = r["touched_bytes"] / MIB
        r["rss_mib"] = r["rss_bytes"] / MIB
        r["rss_delta_mib"] = r["rss_delta_bytes"] / MIB
        r["faults_if_4k"] = r["touched_bytes"] // page
    failures = check_steps(rows) + check_cow(cow, write_bytes)
    cow_row = cow_row_of(cow, write_bytes, params.cow_size_bytes)
    labels = [f"{r['pages']}: {r['step']}" for r in rows] + ["child after COW writes"]
    plot_xy(
        labels,
        {
            "RSS / USS delta (MiB)": [r["rss_delta_mib"] for r in rows] + [cow_row["uss_delta_mib"]],
            "touched / written span (MiB)": [r["touched_mib"] for r in rows] + [write_bytes / MIB],
        },
        run_dir / "paging.png",
        title=f"demand paging of {format_size(params.size_bytes)}",
        xlabel="step",
        ylabel="MiB",
        bars=True,
    )
    return Report(
        ok=not failures,
        tables=[
            Table("demand paging (RSS from psutil, minor faults from getrusage)", rows, STEP_COLUMNS),
            Table("copy-on-write in a forked child (USS = private memory)", [cow_row], COW_COLUMNS),
        ],
        notes=[
            "allocation reserves addresses only: RSS grows at the first write to each page (one minor fault per page;"
            " one per 2 MiB with transparent huge pages, which zero 512x more memory per fault)",
            "the child writes 1 byte per page yet gets a private copy of each whole page: COW works in pages",
        ],
        failures=failures,
        data={"cow": cow_row},
        files=["paging.png"],
    )


def cow_row_of(cow: dict, write_bytes: int, array_bytes: int) -> dict:
    """The copy-on-write table's row: the child's private memory before and after its writes."""
    return {
        "array": format_size(array_bytes),
        "child_wrote": f"{cow['child_pages_written']} bytes, 1 per page",
        "pages_written": cow["child_pages_written"],
        "uss_before_mib": cow["child_uss_before_bytes"] / MIB,
        "uss_after_mib": cow["child_uss_after_bytes"] / MIB,
        "uss_delta_mib": cow["child_uss_delta_bytes"] / MIB,
        "expected_mib": write_bytes / MIB,
        "minor_faults": cow["child_minor_faults"],
        "us_per_fault": cow["child_us_per_fault"],
        "parent_unchanged": cow["parent_unchanged"],
    }
