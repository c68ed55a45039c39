"""What `python -m playground calibrate` runs on launched ranks: every pair ping-pongs at once.

Ranks 2k and 2k+1 form a pair; for each size every pair sends n bytes of zeros back and forth,
all pairs at the same time after a barrier, and each pair's even rank records its median round
trip. With two ranks this is the textbook ping-pong (alpha and beta of an idle link); with more
ranks than cores it is what a collective does on this machine: every rank's message waits for a
core, wakes a sleeping receiver, and competes with the others' copies. The calibration compares
the two (playground/models/calibration.py). Three patterns (playground/comm/patterns.py): the
ping-pong, the ping-ping and the window, where a message is mostly there before its receiver asks;
then, after every size's three and a numpy probe, up to 1 MiB the ping-ping once more while every
rank's other thread computes (`behind_compute`: what a training rank's collectives pay beside its
backward; last, as the compute leaves numpy's threads spinning for a while).

Round trips per size fit a budget: rank 0 times one probe round trip and tells every rank how many
fit `budget_s` (at least `min_reps`, at most `reps`), so a 64 MiB size on 8 ranks costs a few
hundred milliseconds, not seconds. The echo is checked after the timing (one byte, untimed).
"""

import contextlib
import resource
import statistics
from dataclasses import dataclass

import numpy as np

from playground.comm.patterns import (
    BEHIND_COMPUTE_MAX_BYTES,
    BEHIND_COMPUTE_REPS,
    MESSAGES_PER_UNIT,
    PATTERNS,
    WINDOW,
    Computing,
    numpy_times,
    timed,
)
from playground.config.node import NodeContract
from playground.core.errors import ParamError, ResultMismatch
from playground.core.sizes import Size, format_size

MIN_REPS = 3  # a median of 3 drops one hiccup
NUMPY_REPS = 300  # ping-ping messages the numpy probe runs after (64 B each: about 10 ms)


@dataclass(frozen=True)
class Params:
    # message bytes, each ping-ponged by every pair
    sizes: tuple[Size, ...] = (64, 4096, 65536, 1 << 20)
    reps: int = 50  # timed round trips per size, at most
    warmup: int = 3  # untimed round trips before them
    budget_s: float = 0.5  # seconds per size for its timed round trips (at least 3 of them)

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1:
            raise ParamError("sizes", "give at least one size >= 1 byte")
        if self.reps < MIN_REPS:
            raise ParamError("reps", f"must be >= {MIN_REPS}, got {self.reps}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")
        if not self.budget_s > 0:
            raise ParamError("budget_s", f"must be > 0 seconds, got {self.budget_s}")


def check_scenario(params: Params, ranks: int) -> None:
    if ranks < 2 or ranks % 2:
        raise ParamError("ranks", f"pairs ping-pong: an even rank count >= 2, got {ranks}")


def _cpu_s() -> tuple[float, float]:
    """(this process's CPU seconds, all threads; this thread's), user + system."""
    p, t = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_THREAD)
    return p.ru_utime + p.ru_stime, t.ru_utime + t.ru_stime


def main(comm, params: Params) -> dict:
    peer = comm.rank ^ 1
    idle = [(n, pattern) for n in params.sizes for pattern in PATTERNS]
    computing = [(n, "behind_compute") for n in params.sizes if n <= BEHIND_COMPUTE_MAX_BYTES]
    steps = len(idle) + len(computing)

    def measured(k: int, n: int, pattern: str) -> dict:
        comm.progress(k, steps, f"{pattern} {format_size(n)}")
        return _pattern_row(comm, peer, n, pattern, params)

    rows = [measured(k, n, pattern) for k, (n, pattern) in enumerate(idle)]
    comm.barrier()
    hot_s, after_s = numpy_times(comm, peer, np.zeros(64, np.uint8), np.empty(64, np.uint8), NUMPY_REPS)
    rows.append({"size": 64, "reps": NUMPY_REPS, "pattern": "numpy", "median_s": after_s, "hot_s": hot_s})
    # Last: numpy's BLAS threads go on spinning for a while after the compute thread's last matrix
    # product and take the cores from whatever is measured next (on 2 ranks a 1 KiB ping-pong right
    # after it took 64 us a message, 17 us before it, the ranks' own threads getting 4% of the CPU).
    rows += [measured(len(idle) + k, n, pattern) for k, (n, pattern) in enumerate(computing)]
    comm.progress(steps, steps, "done")
    return {"rows": rows}


def _pattern_row(comm, peer: int, n: int, pattern: str, params: Params) -> dict:
    """`pattern` on n-byte messages with `peer`, timed: its row (see `pattern_rows`)."""
    buf, out = np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
    comm.barrier()
    computing = Computing() if pattern == "behind_compute" else contextlib.nullcontext()
    with computing:
        probe = timed(comm, pattern, peer, buf, out, 1 + params.warmup)[-1]
        most = BEHIND_COMPUTE_REPS if pattern == "behind_compute" else params.reps
        # each its own count: an exchange of 16 MiB takes 4x as long as a ping-pong
        reps = min(most, max(MIN_REPS, int(params.budget_s / max(probe, 1e-9))))
        reps = comm.bcast_obj(reps if comm.rank == 0 else None, root=0)  # every pair the same count
        comm.barrier()
        cpu0 = _cpu_s()
        times = timed(comm, pattern, peer, buf, out, reps)
        cpu1 = _cpu_s()
    if out.any():  # the echo must be the zeros sent
        wrong = int(np.flatnonzero(out)[0])
        raise ResultMismatch(
            comm.rank, f"the echo of {n} bytes from rank {peer} has byte {wrong} = {out[wrong]}, expected 0"
        )
    return {
        "size": n,
        "reps": reps,
        "messages": reps * (WINDOW if pattern == "window" else 1),
        "pattern": pattern,
        "median_s": float(np.median(times)),
        "mean_s": float(np.mean(times)),
        "cpu_s": cpu1[0] - cpu0[0],
        "main_cpu_s": cpu1[1] - cpu0[1],
    }


def pattern_rows(results: list[dict]) -> list[dict]:
    """Every rank's rows as one per (pattern, size): `time_s` the median over pairs of the even
    rank's median (ping-pong: half its round trip, one way; ping-ping: a whole exchange; window: a
    window's time per message), `mean_s` the same of the means, and the CPU seconds per message of
    all ranks together (`cpu_s`: every thread; `main_cpu_s`: the ranks' own threads)."""
    by: dict[tuple[str, int], list[tuple[int, dict]]] = {}
    for rank, res in enumerate(results):
        for row in res["rows"]:
            by.setdefault((row["pattern"], row["size"]), []).append((rank, row))
    out = []
    num_ranks = len(results)
    for (pattern, size), rows in by.items():
        if pattern == "numpy":  # every rank's probe, the median over ranks
            after = statistics.median(r["median_s"] for _, r in rows)
            hot = statistics.median(r["hot_s"] for _, r in rows)
            out.append(
                {"pattern": pattern, "size": size, "ranks": num_ranks, "reps": rows[0][1]["reps"],
                 "time_s": after, "cpu_s": after, "main_cpu_s": after, "hot_s": hot}
            )  # fmt: skip
            continue
        evens = sorted(r["median_s"] for rank, r in rows if rank % 2 == 0)
        median = (
            evens[len(evens) // 2]
            if len(evens) % 2
            else (evens[len(evens) // 2 - 1] + evens[len(evens) // 2]) / 2
        )
        evens_mean = sorted(r["mean_s"] for rank, r in rows if rank % 2 == 0)
        first = rows[0][1]
        messages = num_ranks * first.get("messages", first["reps"])
        out.append(
            {
                "pattern": pattern,
                "size": size,
                "ranks": num_ranks,
                "reps": first["reps"],
                "time_s": median / MESSAGES_PER_UNIT[pattern],  # a one-way message's share of the unit
                "mean_s": statistics.median(evens_mean) / MESSAGES_PER_UNIT[pattern],
                "cpu_s": sum(r["cpu_s"] for _, r in rows) / messages,
                "main_cpu_s": sum(r["main_cpu_s"] for _, r in rows) / messages,
            }
        )
    return out


def summarize(results: list[dict], params: Params, run_dir):
    from playground.display.report import Report, Table

    rows = pattern_rows(results)
    return Report(ok=True, tables=[Table("pairs", rows)], data={"patterns": rows})


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
