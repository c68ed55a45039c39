"""Demand paging and copy-on-write deltas within sensible bounds of the sizes touched."""

import pytest
from tools import need

from playground.core import machine
from playground.memlab import paging

MIB = 1024 * 1024
SLACK = 4 * MIB


def test_rss_grows_with_what_is_touched_not_what_is_allocated():
    steps = paging.demand_paging(32 * MIB)
    alloc, half, rest = steps
    assert abs(alloc.rss_delta_bytes) < SLACK
    assert abs(half.rss_delta_bytes - 16 * MIB) < SLACK
    assert abs(rest.rss_delta_bytes - 16 * MIB) < SLACK
    pages = 16 * MIB // 4096
    assert pages <= half.minor_faults < pages * 1.1  # one fault per 4 KiB page (plus a little noise)
    assert half.us_per_fault > 0


def test_huge_pages_fault_per_2_mib_when_the_kernel_gives_them():
    # A property of the machine's kernel, not a tool: off, this skips with why; under CI
    # (PLAYGROUND_REQUIRE_TOOLS, whose machines have THP at madvise or always) it fails instead.
    mode = machine.thp_mode()
    need(mode in ("always", "madvise"), f"transparent huge pages are {mode} in {machine.THP_ENABLED}")
    steps = paging.demand_paging(32 * MIB, huge_pages=True)
    half = steps[1]
    assert abs(half.rss_delta_bytes - 16 * MIB) < SLACK
    assert half.minor_faults < 16 * MIB // 4096 // 4  # far fewer faults than 4 KiB pages


@pytest.mark.timeout(30)
def test_child_copy_on_write_is_per_page():
    cow = paging.copy_on_write(16 * MIB, 4 * MIB)
    assert cow.child_pages_written == 1024
    assert abs(cow.child_uss_delta_bytes - 4 * MIB) < SLACK  # 1 byte a page, whole pages copied
    assert 1024 <= cow.child_minor_faults < 1024 * 1.2
    assert cow.parent_unchanged
