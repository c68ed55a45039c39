"""Toy address translation (seed §4.1): virtual page number + offset -> physical frame + offset.

A virtual address splits into a virtual page number (VPN, the high bits) and an offset inside
the page (the low log2(page size) bits). The page table maps VPN -> physical frame number (PFN);
the offset passes through unchanged. Exercise 8: 16 KiB pages, VPN 3 -> frame 77, so
0xC123 = 3 * 0x4000 + 0x123 -> 77 * 0x4000 + 0x123 = 0x134123. An unmapped VPN is a page fault.
"""

from dataclasses import dataclass

from playground.core.errors import PlaygroundError, UsageError


class PageFault(PlaygroundError, LookupError):
    """Virtual page `vpn` (of `virtual_address`) has no frame in this page table (a LookupError
    too: a missing mapping)."""

    def __init__(self, vpn: int, virtual_address: int):
        self.vpn, self.virtual_address = vpn, virtual_address
        super().__init__(f"virtual page {vpn} (address {virtual_address:#x}) is not mapped")


@dataclass(frozen=True)
class Translation:
    process: str
    virtual_address: int
    vpn: int
    offset: int
    pfn: int | None  # None: page fault
    physical_address: int | None


class PageTable:
    """One process's map from virtual page numbers to physical frame numbers."""

    def __init__(self, page_bytes: int, entries: dict[int, int]):
        if page_bytes <= 0 or page_bytes & (page_bytes - 1):
            raise UsageError(f"must be a power of two, got {page_bytes}", field="page_bytes")
        self.page_bytes = page_bytes
        self.offset_bits = page_bytes.bit_length() - 1
        self.entries = dict(entries)

    def split(self, virtual_address: int) -> tuple[int, int]:
        """(vpn, offset): the high bits and the low offset_bits of the address."""
        return virtual_address >> self.offset_bits, virtual_address & (self.page_bytes - 1)

    def translate(self, virtual_address: int) -> int:
        """The physical address, or PageFault if the page is not mapped."""
        vpn, offset = self.split(virtual_address)
        if vpn not in self.entries:
            raise PageFault(vpn, virtual_address)
        return (self.entries[vpn] << self.offset_bits) | offset

    def __repr__(self) -> str:
        return f"PageTable(page_bytes={self.page_bytes}, {len(self.entries)} entries)"


def translate_all(tables: dict[str, PageTable], addresses: list[tuple[str, int]]) -> list[Translation]:
    """Each (process, virtual address) through its process's table; faults become pfn=None rows."""
    rows = []
    for process, vaddr in addresses:
        table = tables[process]
        vpn, offset = table.split(vaddr)
        paddr: int | None
        pfn: int | None
        try:
            paddr = table.translate(vaddr)
            pfn = table.entries[vpn]
        except PageFault:
            paddr = pfn = None
        rows.append(Translation(process, vaddr, vpn, offset, pfn, paddr))
    return rows


def parse_address(text: str | int) -> int:
    """An address from an int or a string in hex (0x...) or decimal."""
    if isinstance(text, int):
        return text
    return int(text, 0)
