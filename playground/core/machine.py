"""Facts about the machine a run measures: cores, CPU, caches, pages, timer slack, load, namespace.

One module for what the labs, the reports and the lecture page say about the machine (and set on
it), so two pages from two machines can be compared. Caches are read from sysfs
(/sys/devices/system/cpu/cpu0/cache/index*), the source `lscpu` uses; lscpu's totals add up every
core's private caches, so per-core sizes come from sysfs. Missing files (containers, non-Linux)
give empty answers rather than errors: the labs still run.
"""

import ctypes
import mmap
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from playground.core.sizes import format_size, parse_size

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
NETNS_DIR = "/var/run/netns"
_PR_SET_TIMERSLACK = 29
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters


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


def usable_cores() -> int:
    """CPUs this process may run on (a container or taskset may allow fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    text = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1) if m else (platform.processor() or os.uname().machine)


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


def set_timer_slack_ns(slack_ns: int = 1) -> bool:
    """Ask Linux for tighter sleep wake-ups for this thread (prctl PR_SET_TIMERSLACK): by default
    it adds up to 50 us to every sleep."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_TIMERSLACK, slack_ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def sleep_until(deadline_s: float, spin_tail_s: float = 0.0) -> None:
    """Wait until time.monotonic() >= deadline: sleep most of it, spin the last `spin_tail_s`."""
    remaining = deadline_s - time.monotonic()
    if remaining > spin_tail_s:
        time.sleep(remaining - spin_tail_s)
    while time.monotonic() < deadline_s:
        pass


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for the next allocation instead of handing it back to the kernel;
    True if the C library did it (musl and macOS have no mallopt: nothing happens).

    By default malloc serves a block above its mmap threshold (128 KiB, growing to 32 MiB) with a
    fresh mmap and unmaps it on free, and trims the heap's free top: the next allocation touches new
    pages the kernel zero-fills, a page fault per 4 KiB. Every rank allocates the same buffers again
    and again (an all-reduce's result: 16 MiB cost 4 ms instead of 1.2 ms here; a training step's
    activations: 15,400 faults and 40 ms of system time a step on the default model). With mmap off
    and no trimming the second use reuses the first's memory. The price: a process keeps its peak
    heap. Set once at the start of every rank (worker.py) and of the step timer."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def current_netns() -> str:
    """The name (under /var/run/netns) of the calling thread's network namespace; "" in the machine's
    own namespace or when it has no name."""
    try:
        ino = os.stat("/proc/thread-self/ns/net").st_ino
        names = os.listdir(NETNS_DIR)
    except OSError:
        return ""
    for name in names:
        try:
            if os.stat(os.path.join(NETNS_DIR, name)).st_ino == ino:
                return name
        except OSError:
            continue
    return ""


def load_note() -> str:
    """One line on how busy the machine was, for reports whose timings it explains."""
    cores = usable_cores()
    load1, load5, _ = os.getloadavg()
    busy = " -- busier than its cores: expect late wake-ups and stretched timings" if load1 > cores else ""
    return f"Machine: {cores} cores usable, load average {load1:.1f} (1 min) / {load5:.1f} (5 min){busy}."


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def describe_machine() -> dict[str, str]:
    """Label -> value, in the order the lecture page and the results pages show them."""
    import numpy
    import psutil
    import zmq

    caches = data_caches()
    cache_text = ", ".join(
        f"{c.name} {format_size(c.size_bytes)}"
        + (f" (shared by {c.shared_by_cpus} CPUs)" if c.shared_by_cpus > 1 else "")
        for c in caches
    )
    load1, load5, _ = os.getloadavg()
    return {
        "CPU": cpu_model(),
        "cores": f"{usable_cores()} usable of {os.cpu_count()} ({psutil.cpu_count(logical=False) or '?'} physical)",
        "caches (sysfs)": cache_text or "not reported",
        "cache line / page": f"{cache_line_bytes()} B / {format_size(page_bytes())}"
        f" (transparent huge pages: {thp_mode()})",
        "memory": format_size(psutil.virtual_memory().total),
        "OS / kernel": f"{_os_name()} / Linux {platform.release()}"
        if sys.platform.startswith("linux")
        else f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy / pyzmq / libzmq": f"{numpy.__version__} / {zmq.__version__} / {zmq.zmq_version()}",
        "load average at start": f"{load1:.1f} (1 min), {load5:.1f} (5 min)",
    }


def machine_facts() -> dict:
    """The numbers the lecture's figures and sentences use: cores, cache line, page size."""
    return {"cores": usable_cores(), "line": cache_line_bytes(), "page_bytes": page_bytes()}
