"""Contiguous vs paged allocation under the same random workload (seed §4.3).

Capacity 10,000 units, 4,000 steps, each an allocation of 20-399 units or the free of a random
live block. Contiguous first fit fails by external fragmentation (enough free units, no hole big
enough); paging fails only when pages run out and wastes the tail of each block's last page.
"""

from dataclasses import dataclass

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.memlab import fragmentation_report
from playground.models.allocation import ContiguousAllocator, PagedAllocator, make_workload, run_workload


@dataclass(frozen=True)
class Params:
    capacity: int = 10_000  # memory of each allocator, in units (abstract: bytes, tokens, ...)
    # workload steps: each allocates (half of them, or when nothing is live) or frees a random live block
    num_steps: int = 4_000
    min_size: int = 20  # smallest allocation, units (sizes uniform in min_size..max_size)
    max_size: int = 399  # largest allocation, units
    page_units: int = 16  # page size of the paged allocator, units (capacity // page_units pages)
    seed: int = 0  # seed of the workload, the same for both allocators
    show_failures: int = 5  # refused requests listed per allocator, with their cause (0: none)

    def __post_init__(self):
        if self.capacity <= 0 or self.num_steps <= 0:
            raise ParamError(
                "capacity", f"capacity and num_steps must be > 0, got {self.capacity}, {self.num_steps}"
            )
        if not 1 <= self.min_size <= self.max_size:
            raise ParamError(
                "min_size", f"need 1 <= min_size <= max_size, got {self.min_size}..{self.max_size}"
            )
        if not 1 <= self.page_units <= self.capacity:
            raise ParamError("page_units", f"must be in 1..capacity, got {self.page_units}")
        if self.show_failures < 0:
            raise ParamError("show_failures", f"must be >= 0, got {self.show_failures}")


def main(comm, params: Params) -> dict:
    workload = make_workload(params.num_steps, params.min_size, params.max_size, params.seed)
    contiguous = run_workload(
        ContiguousAllocator(params.capacity), "contiguous first fit", workload, params.capacity
    )
    paged = run_workload(
        PagedAllocator(params.capacity, params.page_units),
        f"paged ({params.page_units}/page)",
        workload,
        params.capacity,
    )
    rows = [contiguous.row(params.capacity), paged.row(params.capacity)]
    examples = [
        {
            "policy": stats.policy,
            "step": f.step,
            "request": f.request,
            "free_units": f.free_units,
            "holes": f.num_holes if stats is contiguous else "-",
            "largest_hole": f.largest_hole,
            "cause": f.cause,
        }
        for stats in (contiguous, paged)
        for f in stats.failures[: params.show_failures]
    ]
    ok = all(f.cause == "out of space" for f in paged.failures)  # paging has no external fragmentation
    return {"ok": ok, "rows": rows, "examples": examples}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return fragmentation_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "fragmentation is a single-process model"))
