"""What the operating system says about the memory hierarchy: caches, line size, pages, THP.

Read from sysfs (/sys/devices/system/cpu/cpu0/cache/index*), the same source `lscpu` uses;
lscpu's totals add up every core's private caches, so per-core sizes come from sysfs. Missing
files (containers, non-Linux) give an empty list rather than an error: the lab still runs.
"""

import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

from playground.sizes import parse_size

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class CacheLevel:
    level: int
    kind: str  # Data, Instruction, Unified
    size_bytes: int
    line_bytes: int
    shared_by_cpus: int

    @property
    def name(self) -> str:
        return f"L{self.level}" + ("d" if self.kind == "Data" else "i" if self.kind == "Instruction" else "")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _count_cpus(cpu_list: str) -> int:
    total = 0
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        total += int(hi) - int(lo) + 1 if hi else 1
    return total


def data_caches(root: Path = SYSFS_CACHE) -> list[CacheLevel]:
    """The caches a load goes through (data and unified), smallest level first."""
    levels = []
    for index in sorted(root.glob("index*")):
        kind, level, size = _read(index / "type"), _read(index / "level"), _read(index / "size")
        if kind not in ("Data", "Unified") or not level or not size:
            continue
        line = _read(index / "coherency_line_size") or "64"
        shared = _read(index / "shared_cpu_list") or "0"
        levels.append(
            CacheLevel(
                int(level),
                kind,
                parse_size(size.replace("K", "KiB").replace("M", "MiB")),
                int(line),
                _count_cpus(shared),
            )
        )
    return sorted(levels, key=lambda c: c.level)


def cache_line_bytes(root: Path = SYSFS_CACHE) -> int:
    """The L1 data cache's line size (64 when the OS does not say)."""
    caches = data_caches(root)
    return caches[0].line_bytes if caches else 64


def page_bytes() -> int:
    return mmap.PAGESIZE


def thp_mode(path: Path = THP_ENABLED) -> str:
    """Transparent huge pages policy: 'always', 'madvise', 'never' or 'unknown'."""
    text = _read(path) or ""
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else "unknown"


def cpu_model() -> str:
    text = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1) if m else os.uname().machine
