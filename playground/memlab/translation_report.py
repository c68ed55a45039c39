"""The translation lab's report: one row per address (VPN, offset, frame, physical) and the
check of every translation the scenario expects."""

from pathlib import Path

from playground.display.report import Report, Table


def report(res: dict, params, run_dir: Path) -> Report:
    """The report from rank 0's result `res` (`params`: the node's Params)."""
    rows = res["rows"]
    failures = [
        f"{r['process']}:{r['virtual']} -> {r['physical']}, expected {r['expected']}"
        for r in rows
        if r["ok"] is False
    ]
    bits = params.page_size.bit_length() - 1
    return Report(
        ok=not failures,
        tables=[Table(f"address translation, {params.page_size // 1024} KiB pages", rows)],
        notes=[
            f"offset = low {bits} bits (page {params.page_size:#x} bytes), VPN = the rest; "
            "physical = frame * page size + offset"
        ],
        failures=failures,
    )
