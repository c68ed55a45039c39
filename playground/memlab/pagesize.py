"""How big should a page be (seed §4.4)? Internal waste against page-table size.

For a set of block sizes and a page size P, a block of s units takes ceil(s / P) pages and
wastes ceil(s / P) * P - s units in its last page; the page table needs one entry per page.
Small pages waste little (about P/2 a block when sizes are spread out) but need many entries;
big pages the opposite. Exercise 9: 700 tokens at 16 a page -> 44 pages, 4 wasted; at 256 a
page -> 3 pages, 68 wasted.
"""

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class PageSizeRow:
    page_units: int
    pages: int  # = page-table entries
    used_units: int
    waste_units: int
    waste_pct: float  # of the units allocated
    half_page_estimate_pct: float  # the model: (P-1)/2 wasted a block
    page_table_bytes: int


def pages_and_waste(size: int, page_units: int) -> tuple[int, int]:
    """(pages, wasted units) for one block of `size` units."""
    pages = math.ceil(size / page_units)
    return pages, pages * page_units - size


def tradeoff(block_sizes: list[int], page_units_list: list[int], entry_bytes: int = 8) -> list[PageSizeRow]:
    """One row per page size over the same blocks."""
    rows = []
    total = sum(block_sizes)
    for p in page_units_list:
        pages = waste = 0
        for s in block_sizes:
            n, w = pages_and_waste(s, p)
            pages += n
            waste += w
        estimate = len(block_sizes) * (p - 1) / 2  # sizes spread over whole units: (P-1)/2 a block
        rows.append(
            PageSizeRow(
                page_units=p,
                pages=pages,
                used_units=total,
                waste_units=waste,
                waste_pct=100.0 * waste / (total + waste) if total + waste else 0.0,
                half_page_estimate_pct=100.0 * estimate / (total + estimate) if total + estimate else 0.0,
                page_table_bytes=pages * entry_bytes,
            )
        )
    return rows


def random_blocks(num_blocks: int, min_size: int, max_size: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(min_size, max_size) for _ in range(num_blocks)]
