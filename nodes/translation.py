"""Toy address translation (seed §4.1, exercise 8) as a table.

Each address "PROCESS:VADDR" goes through that process's page table: VPN and offset, frame,
physical address (or a page fault). The default tables show exercise 8 (16 KiB pages, page 3 ->
frame 77: 0xC123 -> 0x134123), two neighbouring addresses (0x3FFF, 0x4000) that land in frames
far apart, and two processes using the same virtual address for different physical memory.
`expect` lists translations the run must reproduce.
"""

from dataclasses import dataclass, field

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.core.sizes import Size
from playground.display.report import Report
from playground.memlab import translation_report
from playground.memlab.translation import PageTable, parse_address, translate_all


def _default_tables() -> dict:
    return {"A": {0: 12, 1: 40, 3: 77}, "B": {0: 5, 3: 9}}


def _default_expect() -> dict:
    return {"A:0xC123": "0x134123"}


@dataclass(frozen=True)
class Params:
    page_size: Size = 16 * 1024  # bytes, a power of two: the offset is the low log2(page_size) bits
    # process -> {virtual page: frame}; a page not listed faults
    tables: dict = field(default_factory=_default_tables)
    # translated in order, each PROCESS:VADDR (a process of tables; hex 0x... or decimal)
    addresses: tuple[str, ...] = ("A:0xC123", "A:0x3FFF", "A:0x4000", "B:0xC123", "B:0x4000")
    expect: dict = field(default_factory=_default_expect)  # "PROC:VADDR" -> physical address

    def __post_init__(self):
        if self.page_size <= 0 or self.page_size & (self.page_size - 1):
            raise ParamError("page_size", f"must be a power of two, got {self.page_size}")
        for proc, entries in self.tables.items():
            if not isinstance(entries, dict) or not all(
                isinstance(k, int) and isinstance(v, int) and k >= 0 and v >= 0 for k, v in entries.items()
            ):
                raise ParamError(
                    "tables", f"{proc!r} must map page numbers to frame numbers (ints >= 0), got {entries!r}"
                )
        for text in list(self.addresses) + list(self.expect):
            proc, sep, addr = str(text).partition(":")
            if not sep or proc not in self.tables:
                raise ParamError(
                    "addresses",
                    f"{text!r} must be PROCESS:ADDRESS with a process from tables "
                    f"({', '.join(map(str, self.tables))})",
                )
            try:
                parse_address(addr)
            except ValueError:
                raise ParamError("addresses", f"{text!r}: {addr!r} is not a number (e.g. 0xC123)") from None


def _split(text: str) -> tuple[str, int]:
    proc, _, addr = text.partition(":")
    return proc, parse_address(addr)


def main(comm, params: Params) -> dict:
    tables = {proc: PageTable(params.page_size, entries) for proc, entries in params.tables.items()}
    wanted = list(params.addresses) + [a for a in params.expect if a not in params.addresses]
    rows = []
    for text, t in zip(wanted, translate_all(tables, [_split(a) for a in wanted]), strict=True):
        expected = params.expect.get(text)
        rows.append(
            {
                "process": t.process,
                "virtual": f"{t.virtual_address:#x}",
                "vpn": t.vpn,
                "offset": f"{t.offset:#x}",
                "frame": t.pfn if t.pfn is not None else "page fault",
                "physical": f"{t.physical_address:#x}" if t.physical_address is not None else "-",
                "expected": expected or "",
                "ok": None if expected is None else t.physical_address == parse_address(expected),
            }
        )
    return {"ok": all(r["ok"] is not False for r in rows), "rows": rows}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return translation_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "translation is a single-process model"))
