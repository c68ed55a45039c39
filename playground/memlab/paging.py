"""Demand paging measured for real (seed §4.2, §4.5): RSS, page faults, copy-on-write.

Allocating an anonymous mapping only reserves virtual addresses; the kernel hands out a
physical page at the first touch of each page (a minor page fault). So resident memory (RSS,
from psutil) grows with what is touched, not with what is allocated, and the minor-fault
count (getrusage) grows by one per page touched: size / 4 KiB, or size / 2 MiB with
transparent huge pages. After fork() parent and child share every page read-only; the first
write to a page in the child copies that one page, so the child's private memory (USS) grows
by whole pages even if it writes one byte in each.

The array is a numpy view of an anonymous mmap rather than np.empty: for sizes under glibc's
mmap threshold (up to 32 MiB) malloc may hand back memory that is already resident, which
would hide the effect; the mapping also lets us choose the page size with madvise.
"""

import json
import mmap
import os
import resource
import time
from dataclasses import asdict, dataclass

import numpy as np
import psutil

from playground.core.errors import LabError, WaitTimeout

HUGE_PAGE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class PagingStep:
    step: str
    touched_bytes: int
    rss_bytes: int  # resident set after the step
    rss_delta_bytes: int  # since the step before
    minor_faults: int  # during the step
    step_s: float
    us_per_fault: float | None


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def uss_bytes() -> int:
    """Private (unshared) memory of this process: what copy-on-write grows."""
    return psutil.Process().memory_full_info().uss


def allocate(size_bytes: int, huge_pages: bool) -> tuple[mmap.mmap, np.ndarray]:
    """An untouched anonymous mapping and a uint8 view of it."""
    region = mmap.mmap(-1, size_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(mmap.MADV_HUGEPAGE if huge_pages else mmap.MADV_NOHUGEPAGE)
    except (OSError, AttributeError):
        pass
    return region, np.frombuffer(region, dtype=np.uint8)


def touch(array: np.ndarray, start: int, stop: int, page_bytes: int) -> None:
    """Write one byte in every page of array[start:stop]: the least that faults each page in."""
    array[start:stop:page_bytes] = 1


def demand_paging(size_bytes: int, huge_pages: bool = False) -> list[PagingStep]:
    """Allocate, touch half, touch all; RSS and minor faults after each step. One byte is
    written in every 4 KiB either way: with huge pages the fault count shows the granularity."""
    page = mmap.PAGESIZE
    steps: list[PagingStep] = []
    rss0, faults0, t0 = rss_bytes(), minor_faults(), time.perf_counter()

    def record(name: str, touched: int) -> None:
        nonlocal rss0, faults0, t0
        elapsed, faults, rss = time.perf_counter() - t0, minor_faults() - faults0, rss_bytes()
        steps.append(
            PagingStep(
                name,
                touched,
                rss,
                rss - rss0,
                faults,
                elapsed,
                1e6 * elapsed / faults if faults and touched else None,
            )
        )
        rss0, faults0, t0 = rss_bytes(), minor_faults(), time.perf_counter()

    region, array = allocate(size_bytes, huge_pages)
    record("allocate", 0)
    half = size_bytes // 2
    touch(array, 0, half, page)
    record("touch first half", half)
    touch(array, half, size_bytes, page)
    record("touch second half", size_bytes - half)
    del array
    region.close()
    return steps


@dataclass(frozen=True)
class CowResult:
    child_written_bytes: int  # bytes the child actually wrote (one per page)
    child_pages_written: int
    child_uss_before_bytes: int
    child_uss_after_bytes: int
    child_uss_delta_bytes: int
    child_minor_faults: int
    child_us_per_fault: float | None
    parent_unchanged: bool  # the parent still sees its own data in the pages the child wrote


def copy_on_write(size_bytes: int, child_write_bytes: int, timeout_s: float = 30.0) -> CowResult:
    """The parent fills an array; a forked child writes one byte in each page of the first
    `child_write_bytes`; the child reports how its private memory and fault count changed."""
    page = mmap.PAGESIZE
    region, array = allocate(size_bytes, huge_pages=False)
    array[::page] = 7  # every page resident and shared with the child after fork
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no sockets, no threads of the parent; report and leave at once
        try:
            os.close(read_fd)
            uss0, faults0, t0 = uss_bytes(), minor_faults(), time.perf_counter()
            array[:child_write_bytes:page] = 9
            elapsed, faults, uss1 = time.perf_counter() - t0, minor_faults() - faults0, uss_bytes()
            said: dict[str, object] = {"uss0": uss0, "uss1": uss1, "faults": faults, "elapsed": elapsed}
        except BaseException as e:  # noqa: BLE001 - the parent must hear about any failure
            said = {"error": repr(e)}
        os.write(write_fd, json.dumps(said).encode())
        os._exit(0)
    os.close(write_fd)
    try:
        data = _read_all(read_fd, timeout_s)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    msg = json.loads(data or b'{"error": "child sent nothing"}')
    if "error" in msg:
        raise LabError(f"copy-on-write child (pid {pid}) failed: {msg['error']}", step="copy-on-write child")
    parent_unchanged = bool((array[:child_write_bytes:page] == 7).all())
    del array
    region.close()
    pages = len(range(0, min(child_write_bytes, size_bytes), page))
    return CowResult(
        child_written_bytes=pages,  # one byte per page
        child_pages_written=pages,
        child_uss_before_bytes=msg["uss0"],
        child_uss_after_bytes=msg["uss1"],
        child_uss_delta_bytes=msg["uss1"] - msg["uss0"],
        child_minor_faults=msg["faults"],
        child_us_per_fault=1e6 * msg["elapsed"] / msg["faults"] if msg["faults"] else None,
        parent_unchanged=parent_unchanged,
    )


def _read_all(fd: int, timeout_s: float) -> bytes:
    import select

    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"copy-on-write child sent no result within {timeout_s:.0f}s",
                what="the copy-on-write child's result",
                waited_s=timeout_s,
            )
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def as_dicts(items) -> list[dict]:
    return [asdict(x) for x in items]
