"""The machine a lecture page was measured on, so two pages from two machines can be compared."""

import os
import platform
import sys
from pathlib import Path

import numpy
import psutil
import zmq

from playground.memlab import sysinfo
from playground.sizes import format_size


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def usable_cores() -> int:
    """CPUs this process may run on (a container or taskset may allow fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def describe_machine() -> dict[str, str]:
    """Label -> value, in the order the page shows them."""
    caches = sysinfo.data_caches()
    cache_text = ", ".join(
        f"{c.name} {format_size(c.size_bytes)}"
        + (f" (shared by {c.shared_by_cpus} CPUs)" if c.shared_by_cpus > 1 else "")
        for c in caches
    )
    load1, load5, _ = os.getloadavg()
    return {
        "CPU": sysinfo.cpu_model(),
        "cores": f"{usable_cores()} usable of {os.cpu_count()} ({psutil.cpu_count(logical=False) or '?'} physical)",
        "caches (sysfs)": cache_text or "not reported",
        "cache line / page": f"{sysinfo.cache_line_bytes()} B / {format_size(sysinfo.page_bytes())}"
        f" (transparent huge pages: {sysinfo.thp_mode()})",
        "memory": format_size(psutil.virtual_memory().total),
        "OS / kernel": f"{_os_name()} / Linux {platform.release()}"
        if sys.platform.startswith("linux")
        else f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy / pyzmq / libzmq": f"{numpy.__version__} / {zmq.__version__} / {zmq.zmq_version()}",
        "load average at start": f"{load1:.1f} (1 min), {load5:.1f} (5 min)",
    }


def machine_facts() -> dict:
    """The numbers the figures' readers and sentences use: cores, cache line, page size."""
    return {"cores": usable_cores(), "line": sysinfo.cache_line_bytes(), "page_bytes": sysinfo.page_bytes()}
