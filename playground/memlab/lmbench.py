"""Runs lmbench's lat_mem_rd, the reference for load latency, to put its curve beside ours.

lat_mem_rd is not shipped here (GPL with a publication clause); Debian has it in non-free
(`apt-get install lmbench`, binary under /usr/lib/lmbench/bin/<arch>/). We run it with -t:
its default list is a plain forward stride, which today's prefetchers follow, so it shows
~1 ns out to several MiB; -t ("thrash") hops to a different page on every load, which is the
pattern our `random` layout has. Its output is "size_in_MB ns_per_load" lines on stderr.
"""

import glob
import shutil
import subprocess

from playground.core.errors import LabError, ToolMissing

MIB = 1024 * 1024


def find_lat_mem_rd() -> str | None:
    found = shutil.which("lat_mem_rd")
    if found:
        return found
    paths = sorted(glob.glob("/usr/lib/lmbench/bin/*/lat_mem_rd"))
    return paths[0] if paths else None


def parse_output(text: str) -> tuple[list[int], list[float]]:
    """(sizes_bytes, ns_per_load) from lat_mem_rd's stderr; other lines are ignored."""
    sizes, ns = [], []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            mb, latency = float(parts[0]), float(parts[1])
        except ValueError:
            continue
        sizes.append(int(round(mb * MIB)))
        ns.append(latency)
    return sizes, ns


def run_lat_mem_rd(
    max_mib: int, stride_bytes: int = 64, repetitions: int = 3, thrash: bool = True, timeout_s: float = 600.0
) -> tuple[list[int], list[float]]:
    """lat_mem_rd's curve up to max_mib; ToolMissing if it is not installed, LabError if it fails."""
    exe = find_lat_mem_rd()
    if exe is None:
        raise ToolMissing(
            "lat_mem_rd not found (Debian: enable non-free, apt-get install lmbench)", tool="lat_mem_rd"
        )
    cmd = [exe] + (["-t"] if thrash else []) + ["-N", str(repetitions), str(max_mib), str(stride_bytes)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise LabError(
            f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-200:]}", step="lat_mem_rd"
        )
    return parse_output(proc.stderr)
