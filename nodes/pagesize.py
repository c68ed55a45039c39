"""The page-size trade-off (seed §4.4, exercise 9): internal waste against page-table size.

For 2,000 random block sizes and each page size: pages (= page-table entries), units wasted in
last pages, waste as % of what is allocated beside the half-a-page model, page-table bytes.
A second table checks exercise 9 (700 tokens at 16 and 256 tokens a page).
"""

from dataclasses import asdict, dataclass

from playground.config.node import NodeContract, Ranks
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.memlab import pagesize_report
from playground.memlab.pagesize import pages_and_waste, random_blocks, tradeoff

EXERCISE_9 = [(700, 16, 44, 4), (700, 256, 3, 68)]  # (size, page, pages, waste) from the seed


@dataclass(frozen=True)
class Params:
    num_blocks: int = 2000  # random blocks, the same set for every page size
    min_size: int = 20  # smallest block, units (abstract: bytes, tokens, ...; sizes uniform up to max_size)
    max_size: int = 2000  # largest block, units
    page_units: tuple[int, ...] = (1, 4, 16, 64, 256, 1024)  # the page sizes compared, units (one row each)
    entry_bytes: int = 8  # bytes of one page-table entry: page-table bytes = pages x this
    seed: int = 0  # seed of the block sizes

    def __post_init__(self):
        if self.num_blocks < 1:
            raise ParamError("num_blocks", f"must be >= 1, got {self.num_blocks}")
        if not 1 <= self.min_size <= self.max_size:
            raise ParamError(
                "min_size", f"need 1 <= min_size <= max_size, got {self.min_size}..{self.max_size}"
            )
        if not self.page_units or any(p < 1 for p in self.page_units):
            raise ParamError("page_units", f"each must be >= 1, got {list(self.page_units)}")
        if self.entry_bytes < 1:
            raise ParamError("entry_bytes", f"must be >= 1, got {self.entry_bytes}")


def main(comm, params: Params) -> dict:
    blocks = random_blocks(params.num_blocks, params.min_size, params.max_size, params.seed)
    rows = [asdict(r) for r in tradeoff(blocks, list(params.page_units), params.entry_bytes)]
    checks = []
    for size, page, want_pages, want_waste in EXERCISE_9:
        pages, waste = pages_and_waste(size, page)
        checks.append(
            {
                "sequence": size,
                "page": page,
                "pages": pages,
                "waste": waste,
                "waste_pct": 100.0 * waste / (pages * page),
                "seed_says": f"{want_pages} pages, {want_waste} wasted",
                "ok": (pages, waste) == (want_pages, want_waste),
            }
        )
    return {"ok": all(c["ok"] for c in checks), "rows": rows, "exercise_9": checks}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return pagesize_report.report(results[0], params, run_dir)


CONTRACT = NodeContract(Params, summarize, ranks=Ranks(1, "the page-size model runs in one process"))
