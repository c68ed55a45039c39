"""A quick ping-pong between ranks 0 and 1 that measures this run's alpha and beta.

Why at the start of every run: the model's prediction is only worth printing beside a
measurement if its alpha and beta come from the same transport, machine and load. Rank 0 sends
n bytes of zeros, rank 1 sends them back (rank 0 checks the echo, untimed); half the median round trip is the one-way time T(n), and
`fit_alpha_beta` fits T(n) = alpha + n / beta over a spread of sizes. The fit is broadcast, so
every rank prints and models with the same numbers.

Two loads: `idle` (only ranks 0 and 1 talk, as in the textbook ping-pong) and `loaded` (every
pair 2k <-> 2k+1 ping-pongs at once, rank 0 measuring): in a ring all-reduce every rank sends at
once, and when ranks outnumber cores the idle-link numbers are far too optimistic.
"""

import time

import numpy as np

from playground.core.errors import ResultMismatch
from playground.models.alphabeta import AlphaBeta, fit_alpha_beta

TAG_PINGPONG = 7100
DEFAULT_SIZES_BYTES = (8, 1024, 16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)


def one_way_times_s(
    comm, sizes_bytes=DEFAULT_SIZES_BYTES, reps: int = 20, warmup: int = 3, loaded: bool = False
) -> list[float]:
    """Median one-way time per size on this rank's pair (rank ^ 1); [] for ranks left out."""
    peer = comm.rank ^ 1
    if peer >= comm.size or (not loaded and comm.rank > 1):
        return []
    times = []
    for n in sizes_bytes:
        buf = np.zeros(n, dtype=np.uint8)
        out = np.empty(n, dtype=np.uint8)
        round_trips = []
        for i in range(warmup + reps):
            t0 = time.perf_counter()
            if comm.rank % 2 == 0:
                comm.send(buf, peer, TAG_PINGPONG)
                comm.recv(peer, TAG_PINGPONG, out=out)
            else:
                comm.recv(peer, TAG_PINGPONG, out=out)
                comm.send(out, peer, TAG_PINGPONG)
            if i >= warmup:
                round_trips.append(time.perf_counter() - t0)
            if comm.rank % 2 == 0 and out.any():  # the echo must be the zeros sent (after the timing)
                wrong = np.flatnonzero(out)
                raise ResultMismatch(
                    comm.rank,
                    f"the ping-pong echo of {n} bytes from rank {peer} came back with {wrong.size} "
                    f"wrong bytes (first: byte {wrong[0]} is {out[wrong[0]]}, expected 0; round trip {i})",
                )
        times.append(float(np.median(round_trips)) / 2)
    return times


def measure_alpha_beta(
    comm, sizes_bytes=DEFAULT_SIZES_BYTES, reps: int = 20, loaded: bool = False
) -> tuple[AlphaBeta | None, list[dict]]:
    """(fit, points) on every rank; (None, []) with a single rank, where nothing is sent."""
    if comm.size < 2:
        return None, []
    comm.barrier()
    with comm.tracer.span("pingpong.loaded" if loaded else "pingpong", cat="phase"):
        times = one_way_times_s(comm, sizes_bytes, reps, loaded=loaded)
    if comm.rank == 0:
        fit = fit_alpha_beta(list(sizes_bytes), times)
        msg = {
            "alpha_s": fit.alpha_s,
            "beta_bytes_per_s": fit.beta_bytes_per_s,
            "points": [{"bytes": n, "one_way_s": t} for n, t in zip(sizes_bytes, times, strict=True)],
        }
    else:
        msg = None
    msg = comm.bcast_obj(msg, root=0)
    return AlphaBeta(msg["alpha_s"], msg["beta_bytes_per_s"]), msg["points"]
