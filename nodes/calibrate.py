"""What `python -m playground calibrate` runs on launched ranks: every pair ping-pongs at once.

Ranks 2k and 2k+1 form a pair; for each size every pair sends n bytes of zeros back and forth,
all pairs at the same time after a barrier, and each pair's even rank records its median round
trip. With two ranks this is the textbook ping-pong (alpha and beta of an idle link); with more
ranks than cores it is what a collective does on this machine: every rank's message waits for a
core, wakes a sleeping receiver, and competes with the others' copies. The calibration compares
the two (playground/models/calibration.py).

Round trips per size fit a budget: rank 0 times one probe round trip and tells every rank how many
fit `budget_s` (at least `min_reps`, at most `reps`), so a 64 MiB size on 8 ranks costs a few
hundred milliseconds, not seconds. The echo is checked after the timing (one byte, untimed).
"""

import resource
import time
from dataclasses import dataclass

import numpy as np

from playground.config.node import NodeContract
from playground.core.errors import ParamError, ResultMismatch
from playground.core.sizes import Size, format_size

TAG = 7200
MIN_REPS = 3  # a median of 3 drops one hiccup


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


def _round_trips(
    comm, peer: int, buf: np.ndarray, out: np.ndarray, count: int, both: bool = False
) -> list[float]:
    """`count` round trips with `peer` (both=True: both send at once, then receive: IMB's PingPing)."""
    times = []
    even = comm.rank % 2 == 0
    for _ in range(count):
        t0 = time.perf_counter()
        if even or both:
            comm.send(buf, peer, TAG)
            comm.recv(peer, TAG, out=out)
        else:
            comm.recv(peer, TAG, out=out)
            comm.send(out, peer, TAG)
        times.append(time.perf_counter() - t0)
    return times


def _cpu_s() -> tuple[float, float]:
    """(this process's CPU seconds, all threads; this thread's), user + system."""
    p, t = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_THREAD)
    return p.ru_utime + p.ru_stime, t.ru_utime + t.ru_stime


def main(comm, params: Params) -> dict:
    peer = comm.rank ^ 1
    rows = []
    for k, n in enumerate(params.sizes):
        comm.progress(k, len(params.sizes), format_size(n))
        buf, out = np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
        for both in (False, True):  # each pattern its own count: an exchange of 16 MiB takes 4x as long
            comm.barrier()
            probe = _round_trips(comm, peer, buf, out, 1 + params.warmup, both)[-1]
            reps = min(params.reps, max(MIN_REPS, int(params.budget_s / max(probe, 1e-9))))
            reps = comm.bcast_obj(reps if comm.rank == 0 else None, root=0)  # every pair the same count
            comm.barrier()
            cpu0 = _cpu_s()
            times = _round_trips(comm, peer, buf, out, reps, both)
            cpu1 = _cpu_s()
            if out.any():  # the echo must be the zeros sent
                wrong = int(np.flatnonzero(out)[0])
                raise ResultMismatch(
                    comm.rank,
                    f"the echo of {n} bytes from rank {peer} has byte {wrong} = {out[wrong]}, expected 0",
                )
            rows.append(
                {
                    "size": n,
                    "reps": reps,
                    "pattern": "pingping" if both else "pingpong",
                    "median_s": float(np.median(times)),
                    "cpu_s": cpu1[0] - cpu0[0],
                    "main_cpu_s": cpu1[1] - cpu0[1],
                }
            )
    comm.progress(len(params.sizes), len(params.sizes), "done")
    return {"rows": rows}


def pattern_rows(results: list[dict]) -> list[dict]:
    """Every rank's rows as one per (pattern, size): `time_s` the median over pairs of the even
    rank's median (ping-pong: half its round trip, one way; ping-ping: a whole exchange), and the
    CPU seconds per message of all ranks together (`cpu_s`: every thread; `main_cpu_s`: the ranks'
    own threads)."""
    by: dict[tuple[str, int], list[tuple[int, dict]]] = {}
    for rank, res in enumerate(results):
        for row in res["rows"]:
            by.setdefault((row["pattern"], row["size"]), []).append((rank, row))
    out = []
    num_ranks = len(results)
    for (pattern, size), rows in by.items():
        evens = sorted(r["median_s"] for rank, r in rows if rank % 2 == 0)
        median = (
            evens[len(evens) // 2]
            if len(evens) % 2
            else (evens[len(evens) // 2 - 1] + evens[len(evens) // 2]) / 2
        )
        messages = num_ranks * rows[0][1]["reps"]
        out.append(
            {
                "pattern": pattern,
                "size": size,
                "ranks": num_ranks,
                "reps": rows[0][1]["reps"],
                "time_s": median / 2 if pattern == "pingpong" else median,
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
