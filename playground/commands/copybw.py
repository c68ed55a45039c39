"""`python -m playground bench copy`: this machine's copy bandwidth, on one core and on all of them,
and the bound it sets on a large all-reduce over shared memory at 2, 4 and 8 ranks.

A large all-reduce on one host is memory passes: every byte is read or written a few times, and the
cores share the memory's bandwidth. A pass is S bytes (the buffer) read or written once, counted
per rank. The fewest any path can make (`MIN_PASSES`) is 2 S per rank, whatever N: every byte of
every rank's input has to be read once (each part of the result depends on every rank's copy of
that part), and every byte of every rank's result written once. A two-rank all-reduce, for
instance, at best has each rank read its own half and the peer's copy of that half (S) and write
the reduced half into both buffers (S). Any real path adds to that: a copy into shared memory and
out of it (our transports and MPICH's shared-memory collectives), or a kernel's single copy. So
`MIN_PASSES` at the machine's best copy rate is a bound no all-reduce beats, and ours over it is a
share that cannot exceed 100%: `bound_ms`, the bound `bench table` sets ours against.

For comparison, the passes of our ring over shm (`ring_passes`; collectives/ring.py,
comm/shm_transport.py), in chunks of S/N:
- reduce-scatter: the first chunk is copied into the ring to the right neighbour (read + write: 2);
  each of the N-1 steps reduces the chunk that arrived, read in the left neighbour's ring, with this
  rank's own chunk into the ring slot to the right (or, at the last step, into the result):
  read, read, write (3 a step);
- all-gather: each of N-1 steps copies a chunk into the ring (2) and one out of it (2).
So (2 + 3(N-1) + 4(N-1)) chunks = (7N-5)/N x S per rank: 4.5 S at N = 2, 5.75 S at 4, 6.4 S at 8.

All N ranks do their passes at once on C cores, so the time is at least N x passes x S over the
machine's bandwidth with all cores copying (each core's share: over one core's bandwidth when
N <= C). The bandwidth is that of `copy`: bytes copied per second count two passes (one read, one
write). numpy's copyto (what the transport uses), the C module's memcpy and numpy's add are each
timed in `procs` processes at once, one per core, each on its own buffers of the size, best of
`iters`.
"""

import json
import os
import platform
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from playground.core import flags, interrupts
from playground.core.flags import Text
from playground.core.machine import usable_cores
from playground.core.sizes import format_size

KINDS = ("numpy copy", "C memcpy", "numpy add")
DEFAULT_SIZES = "1MiB,16MiB,64MiB,256MiB"


@dataclass(frozen=True)
class CopyConfig:
    """`bench copy`: the buffer sizes, the rank counts whose bound is shown, copies timed per size."""

    sizes: tuple[int, ...]
    rank_counts: tuple[int, ...]
    iters: int
    out: Path

    @classmethod
    def from_flags(
        cls,
        *,
        sizes: Text = DEFAULT_SIZES,
        step: int = 2,
        iters: int = 20,
        rank_counts: Text = "2,4,8",
        out: str | Path = "runs",
    ) -> "CopyConfig":
        command = "bench copy"
        return cls(
            flags.sizes("--sizes", sizes, flags.integer(command, "--step", step)),
            flags.integers("--rank-counts", rank_counts),
            flags.integer(command, "--iters/-i", iters),
            Path(out),
        )


MIN_PASSES = 2.0  # per rank, in units of the buffer: the input read once, the result written once


def ring_passes(n: int) -> float:
    """Memory passes per rank of the ring all-reduce over shm, in units of the buffer (see above)."""
    return (7 * n - 5) / n


def _one(kind: str, size_bytes: int, iters: int) -> float:
    """GB/s of bytes copied (or, for add, of output written) on this process, best of `iters`."""
    a = np.ones(size_bytes // 4, np.float32)
    b, c = np.ones_like(a), np.empty_like(a)
    best = float("inf")
    if kind == "C memcpy":
        from playground.core.native import load_native

        best = min(load_native().copy_pass(c, a, iters + 1)[1:]) / 1e9
    else:
        for _ in range(iters + 1):  # the first pass faults the pages in
            t0 = time.perf_counter()
            if kind == "numpy copy":
                np.copyto(c, a)
            else:
                np.add(a, b, out=c)
            best = min(best, time.perf_counter() - t0)
    return size_bytes / best / 1e9


def measure(kind: str, size_bytes: int, procs: int, iters: int) -> list[float]:
    """Each process's GB/s when `procs` of them (forked, each moved to a core of its own) copy at once.

    Ctrl-C stops them at once: it is held while they are forked, so that every child is known
    before it can arrive, and each child takes it with the default action (it dies even inside C's
    copy loop); the parent kills and reaps whatever is left before it passes the interrupt on."""
    cores = sorted(os.sched_getaffinity(0))
    read_fd, write_fd = os.pipe()
    pids, status = [], {}
    try:
        with interrupts.held():
            for p in range(procs):
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child
                    _copy_in_child(kind, size_bytes, iters, cores[p % len(cores)], write_fd)
                pids.append(pid)
        for pid in pids:
            status[pid] = os.waitpid(pid, 0)[1]
    except BaseException:
        for pid in pids:
            if pid in status:
                continue  # reaped
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass  # reaped just as the interrupt came
        os.close(read_fd)
        os.close(write_fd)
        raise
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        rates = [float(v) for v in f.read().split()]
    failed = [pid for pid in pids if status[pid] != 0]
    if failed or len(rates) != procs:
        raise RuntimeError(f"{len(failed)} of {procs} copying processes failed")
    return rates


def _copy_in_child(kind: str, size_bytes: int, iters: int, core: int, write_fd: int) -> None:
    """A forked child's whole life: its rate on `core` written to `write_fd`, then exit (0 if written)."""
    code = 1
    try:
        for sig in interrupts.INTERRUPTS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.INTERRUPTS)
        os.sched_setaffinity(0, {core})
        os.write(write_fd, f"{_one(kind, size_bytes, iters)}\n".encode())
        code = 0
    finally:
        os._exit(code)


def copy_rates(size_bytes: int, iters: int) -> tuple[float, float]:
    """(one core, all cores together) GB/s copied at `size_bytes`, the best of numpy's and C's copy."""
    cores = usable_cores()
    kinds = [k for k in KINDS if k != "numpy add"]
    one = max(measure(kind, size_bytes, 1, iters)[0] for kind in kinds)
    return one, max(sum(measure(kind, size_bytes, cores, iters)) for kind in kinds)


def rate_for(n: int, one_core_gbps: float, all_cores_gbps: float, cores: int) -> float:
    """The copy rate N ranks have: min(N, cores) cores copying."""
    return one_core_gbps * n if n < cores else all_cores_gbps


def bound_ms(n: int, size_bytes: int, one_core_gbps: float, all_cores_gbps: float, cores: int) -> float:
    """The all-reduce's copy bound at N ranks: N x `MIN_PASSES` x S / (2 x `rate_for` N; a copy is
    two passes), i.e. every rank copying its buffer once, all at once."""
    rate = rate_for(n, one_core_gbps, all_cores_gbps, cores)
    return n * MIN_PASSES * size_bytes / (2 * rate * 1e9) * 1e3


def run_copy(config: CopyConfig) -> int:
    from playground.core.machine import cpu_model
    from playground.core.rundir import make_run_dir

    sizes, rank_counts = config.sizes, config.rank_counts
    iters, cores = config.iters, usable_cores()
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for kind in KINDS:
            one = measure(kind, size, 1, iters)[0]
            all_ = measure(kind, size, cores, iters)
            rows.append({"size": size, "kind": kind, "one_core": one, "all_cores": sum(all_), "each": all_})
    lines = [
        f"Copy bandwidth (GB/s of bytes copied; for add, of the sum written), best of {iters}; "
        f"machine: {cpu_model()}, {cores} cores, Linux {platform.release()}, "
        f"load {os.getloadavg()[0]:.2f}",
        "",
        "| size | kind | one core | all cores together | each core |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        each = ", ".join(f"{v:.1f}" for v in r["each"])
        lines.append(
            f"| {format_size(r['size'])} | {r['kind']} | {r['one_core']:.1f} | {r['all_cores']:.1f} | {each} |"
        )
    lines += [
        "",
        "Bound of any all-reduce over shared memory: N x 2 S / (2 x the best copy rate, numpy's or C's, "
        "with min(N, cores) cores copying): every rank's input read once and its result written once, "
        "the fewest passes any path makes; beside it, the passes of our ring over shm, (7N-5)/N x S:",
        "",
        "| size | ranks | ring's passes per rank (x S) | copy rate used (GB/s) | bound (ms) |",
        "|---|---|---|---|---|",
    ]
    bounds = []
    for size in sizes:
        copies = [r for r in rows if r["size"] == size and r["kind"] != "numpy add"]
        one_gbps, all_gbps = max(r["one_core"] for r in copies), max(r["all_cores"] for r in copies)
        for n in rank_counts:
            rate = rate_for(n, one_gbps, all_gbps, cores)
            ms = bound_ms(n, size, one_gbps, all_gbps, cores)
            bounds.append({"size": size, "ranks": n, "passes": MIN_PASSES, "rate_gbps": rate, "bound_ms": ms})
            lines.append(f"| {format_size(size)} | {n} | {ring_passes(n):.2f} | {rate:.1f} | {ms:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    run_dir = make_run_dir(config.out, "copy")
    (run_dir / "copy.md").write_text(text)
    (run_dir / "copy.json").write_text(json.dumps({"rows": rows, "bounds": bounds}))
    print(f"written: {run_dir / 'copy.md'}")
    return 0
