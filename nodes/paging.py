"""Demand paging and copy-on-write, measured with psutil (seed §4.2, §4.5).

One rank allocates a large array (an anonymous mapping, see playground.memlab.paging), then
touches half and all of it, reading RSS (psutil) and minor page faults (getrusage) after each
step, with 4 KiB pages and with transparent huge pages. Then it forks a child that writes one
byte in each page of part of the parent's array: the child's private memory (USS) grows by
whole pages, and the parent still sees its own data.
"""

import mmap
from dataclasses import dataclass
from typing import Literal

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.core.sizes import Size
from playground.display.report import Report
from playground.memlab import paging, paging_report

MIB = 1024 * 1024


@dataclass(frozen=True)
class Params:
    size_bytes: Size = 256 * MIB  # the array allocated, then touched half and all, in each page mode
    # 4KiB: madvise(MADV_NOHUGEPAGE), base pages; thp: madvise(MADV_HUGEPAGE), 2 MiB transparent huge
    # pages where the kernel grants them (its fault count shows it)
    page_modes: tuple[Literal["4KiB", "thp"], ...] = ("4KiB", "thp")
    cow_size_bytes: Size = 64 * MIB  # copy-on-write part: the array the parent fills, then forks
    child_write_fraction: float = 0.25  # of that array, the part the child writes into (one byte a page)

    def __post_init__(self):
        if self.size_bytes < 8 * MIB:
            raise ParamError("size_bytes", f"must be >= 8 MiB, got {self.size_bytes}")
        if not self.page_modes:
            raise ParamError("page_modes", "give at least one of '4KiB', 'thp'")
        if self.cow_size_bytes < MIB:
            raise ParamError("cow_size_bytes", f"must be >= 1 MiB, got {self.cow_size_bytes}")
        if not 0 < self.child_write_fraction <= 1:
            raise ParamError("child_write_fraction", f"must be in (0, 1], got {self.child_write_fraction}")


def main(comm, params: Params) -> dict:
    rows = []
    for k, mode in enumerate(params.page_modes):
        comm.progress(k, len(params.page_modes) + 1, f"demand paging {mode}")
        with comm.tracer.span("paging.demand", cat="compute", mode=mode):
            steps = paging.demand_paging(params.size_bytes, huge_pages=(mode == "thp"))
        for s in steps:
            rows.append({"pages": mode, **paging.as_dicts([s])[0]})
    comm.progress(len(params.page_modes), len(params.page_modes) + 1, "copy-on-write")
    write_bytes = int(params.cow_size_bytes * params.child_write_fraction)
    with comm.tracer.span("paging.cow", cat="compute"):
        cow = paging.copy_on_write(params.cow_size_bytes, write_bytes)
    comm.progress(1, 1, "done")
    return {
        "ok": True,
        "rows": rows,
        "cow": paging.as_dicts([cow])[0],
        "cow_write_bytes": write_bytes,
        "page_bytes": mmap.PAGESIZE,
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return paging_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(
    Params, summarize, ranks=Ranks(1, "the paging lab runs in one process (plus its fork)")
)
