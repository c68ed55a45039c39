"""From what `calibrate` measured to the costs the models and the simulator use (pure arithmetic).

The measurements (playground/commands/calibrate.py writes them raw into calibration.json):
- `rates`: GB/s of numpy's copy and add at a range of buffer sizes, on one core and on all cores at
  once (commands/hostbench.py);
- `slice_s`: the scheduler's time slice;
- per transport, `patterns`: every pair of ranks ping-ponging at once (nodes/calibrate.py), at 2
  ranks (each rank a core: the textbook ping-pong) and at 2x and 4x as many ranks as cores, each size
  with its one-way time (`time_s`) and the CPU seconds all ranks' threads spent per message (`cpu_s`).

What is derived, by size range of a message of n bytes (`models.piecewise.fit_pieces` over the
transport's own boundaries, where its path changes):
- the bytes: a message is copied into the transport and out of it, each copy at this machine's copy
  rate for the *footprint* of what is running: every rank's buffers together, since the last-level
  cache is shared by all cores (a 4 MiB all-reduce on 8 ranks on 2 cores, 96 MiB of inputs, outputs
  and the rings messages wait in, is copied at memory speed, a 4 MiB ping-pong between two ranks in
  cache; with a core per rank messages are taken as they land and the rings do not count:
  `rank_footprint`); the rest of the time
  grows with n only where the path adds copies (a socket's): `extra` per byte. The same holds for the
  calibration's own ping-pongs: at 8 ranks four messages are in flight at once and share the cache,
  so the copies taken out of a message's CPU time are those of four messages' footprint, and what is
  left is not memory contention counted twice;
- with a core per rank (the 2-rank ping-pong): the idle one-way time, split into CPU (at most the
  CPU seconds measured: a spinning receiver's CPU is not work) and latency (the rest: a sleeping
  receiver waking up, hand-offs to ZeroMQ's I/O threads), half of the CPU charged to the sender and
  half to the receiver;
- with more ranks than cores (each measured rank count is a regime; a run pays the costs of the
  smallest one at or above its rank count): the CPU seconds every thread of every rank spent per
  message, fixed and per byte beyond the copies (context switches, hand-offs that now wait for a
  core, wake-ups), where waiting ranks poll (the shm transport up to two ranks a core) at most what
  the cores had per message (`cores_per_message`: they never idle, so the rest was polling), and no
  latency of its own: the simulator's scheduler adds the waiting for cores. Over shared memory every
  message costs the window's CPU (`window`: both partners post eight sends, then take eight
  messages, so a message is there when its receiver asks; polled, at most the cores' time per
  message too), the exchange's beyond it (`pingping`: each message's receiver runs once for it) is a
  context switch (`switch_s`, charged by the simulator where a core goes on with another rank: where
  ranks sleep, one woken from a receive; where they poll, any), and
  only a message whose receiver waited for it costs the ping-pong's beyond that (`wait_s`: the
  receiver slept and is woken, or polled). Over ZeroMQ, whose I/O threads batch the window, and for
  a calibration without it, every message costs the exchange's CPU where ranks sleep. A rank that
  slept and finds a core idle starts `wake_s` later (the machine's cross-core wake-up,
  commands/hostbench.py);
- an algorithm's own numpy calls (timed on stand-ins in a data-free simulation) at `numpy_scale`: the
  `numpy` probe's time right after a message over its time in a loop, at the regime's rank count;
  and the communicator's Python a simulation times per message (`timed_python_s`, sim/replay.py)
  taken off the messages' fixed CPU, which holds it already;
- an algorithm's working copy of its input (`copy_s_per_byte`) at the copy rate of one rank's
  footprint: it is made as the call starts, before the other ranks' messages pass through the cache;
- reductions at gamma = numpy add's rate for the footprint; the memory traffic all cores share =
  twice the all-cores copy rate at that footprint (a copy reads and writes): in cache every core has
  its own, beyond it they share the memory's.
"""

import math
from collections.abc import Sequence

from playground.comm.shm_stream import CELL_BYTES, WINDOW_CELLS
from playground.comm.shm_transport import streams_from_bytes
from playground.models.contention import HostModel, MessageCosts
from playground.models.piecewise import Piece, fit_pieces, piece_for

READ_WRITE = 2  # a copy moves its bytes twice (read, write): memory traffic per byte copied
READ_READ_WRITE = 3  # a reduction c = a + b: three
# The scheduler's migration cost where the kernel does not let calibrate read it, and for a calibration
# without one: Linux's default (kernel/sched/fair.c: sysctl_sched_migration_cost = 500000 ns).
DEFAULT_MIGRATION_COST_S = 0.5e-3
# The simulated ranks' own Python (the algorithm's loop, the communicator's bookkeeping) is timed as
# it runs and charged to them at this scale, as SMPI times the computation between MPI calls.
PYTHON_SCALE = 1.0


def _loglog(points: Sequence[tuple[float, float]], x: float) -> float:
    """y at x on the log-log line through (x, y) points; flat beyond the ends."""
    pts = sorted(points)
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            f = math.log(x / x0) / math.log(x1 / x0)
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return pts[-1][1]  # pragma: no cover - the loop covers every x between the ends


class Rates:
    """Copy and add rates by footprint (bytes a core's work touches), from `rates` rows."""

    def __init__(self, rows: Sequence[dict]):
        self.copy = [(READ_WRITE * r["bytes"], r["copy_one_gbps"] * 1e9) for r in rows]
        self.copy_all = [(READ_WRITE * r["bytes"], r["copy_all_gbps"] * 1e9) for r in rows]
        self.add = [(READ_READ_WRITE * r["bytes"], r["add_one_gbps"] * 1e9) for r in rows]

    def copy_bytes_per_s(self, footprint_bytes: float) -> float:
        return _loglog(self.copy, footprint_bytes)

    def gamma_bytes_per_s(self, footprint_bytes: float) -> float:
        return _loglog(self.add, footprint_bytes)

    def memory_bytes_per_s(self, footprint_bytes: float) -> float:
        """Memory traffic all cores copying at once move together (a copy reads and writes)."""
        return READ_WRITE * _loglog(self.copy_all, footprint_bytes)


def pingpong_footprint(n: float, num_ranks: int = 2) -> float:
    """What the copies of n-byte ping-pong messages touch: a buffer and the ring per message in
    flight, one per pair of `num_ranks` ranks ping-ponging at once (they share the last-level cache)."""
    return READ_WRITE * n * max(1, num_ranks // 2)


def rank_footprint(size_bytes: float, num_ranks: int, cores: int) -> float:
    """What one rank of a collective on S bytes touches: its input and output (about S each) and,
    where ranks outnumber cores, the rings its messages wait in while other ranks run (with a core
    of its own a rank takes each message as it lands, from the caches near its core)."""
    return (2 if num_ranks <= cores else 3) * size_bytes


def collective_footprint(size_bytes: float, num_ranks: int, cores: int) -> float:
    """What the copies of a collective on S bytes touch: every rank's footprint, all ranks together
    (they share the last-level cache)."""
    return rank_footprint(size_bytes, num_ranks, cores) * num_ranks


def _residual_pieces(
    points: list[tuple[int, float]], rates: Rates, bounds: Sequence[int], num_ranks: int
) -> tuple[Piece, ...]:
    """Pieces fitted to what is left of each time once the ping-pong's two copies are taken out
    (at the copy rate of the footprint of `num_ranks` ranks' ping-pongs)."""
    sizes = [n for n, _ in points]
    left = [max(0.0, t - 2 * n / rates.copy_bytes_per_s(pingpong_footprint(n, num_ranks))) for n, t in points]
    return fit_pieces(sizes, left, bounds, scale=[t for _, t in points])


def cores_per_message(one_way_s: float, num_ranks: int, cores: int) -> float:
    """The CPU seconds `cores` had per message of a ping-pong of every pair of `num_ranks` ranks at
    once (num_ranks / 2 messages in flight, each taking `one_way_s`): where waiting ranks poll, the
    cores never idle and the CPU measured beyond this was polling, not work."""
    return cores * one_way_s / (num_ranks / 2)


def regime_ranks(measured: Sequence[int], num_ranks: int) -> int:
    """The measured rank count whose costs a run of `num_ranks` pays: the smallest at or above it
    (ranks per core only grow the waiting), else the largest."""
    above = [m for m in sorted(measured) if m >= num_ranks]
    return above[0] if above else max(measured)


def message_costs(
    patterns: Sequence[dict],
    rates: Rates,
    bounds: Sequence[int],
    ranks: int,
    idle_ranks: int,
    polling_cores: int = 0,
    windows: bool = True,
) -> tuple[MessageCosts, ...]:
    """Per size range, a message's costs at `ranks` (see the module), before the copies (added by
    `host_model`, which knows the footprint). `polling_cores`: the cores, where the ranks waiting at
    `ranks` poll instead of sleeping (0: they sleep). `windows`: whether the window pattern's CPU is a
    message's (not over ZeroMQ, whose I/O threads batch the window's eight messages to one peer, as a
    collective's messages to different peers are not: `window_applies`)."""

    def points(key: str, at: int, pattern: str = "pingpong") -> list[tuple[int, float]]:
        rows = sorted(
            (p for p in patterns if p["pattern"] == pattern and p["ranks"] == at), key=lambda p: p["size"]
        )
        return [(p["size"], p[key]) for p in rows]

    wall = _residual_pieces(points("time_s", idle_ranks), rates, bounds, idle_ranks)
    cpu = _residual_pieces(_spent(patterns, ranks, idle_ranks, polling_cores), rates, bounds, ranks)
    window = _spent(patterns, ranks, idle_ranks, polling_cores, "window") if windows else []
    exchange = _spent(patterns, ranks, idle_ranks, polling_cores, "pingping")
    sleeping = ranks != idle_ranks and not polling_cores
    ready = window or (exchange if sleeping else [])
    ready_pieces = _residual_pieces(ready, rates, bounds, ranks) if ready else None
    switch = switch_s(patterns, rates, bounds, ranks, idle_ranks, polling_cores) if windows else 0.0
    out = []
    for piece in wall:
        busy = piece_for(cpu, piece.from_bytes)
        fixed_cpu, extra, latency, wait = busy.alpha_s, busy.s_per_byte / 2, 0.0, 0.0
        if ready_pieces is not None:  # a message there when its receiver asks: the window's CPU
            fixed_cpu = min(fixed_cpu, piece_for(ready_pieces, piece.from_bytes).alpha_s)
            wait = max(0.0, busy.alpha_s - fixed_cpu - switch)  # the switch to it is the scheduler's
        if ranks == idle_ranks:
            fixed_cpu = min(fixed_cpu, piece.alpha_s)
            latency = piece.alpha_s - fixed_cpu
            extra = piece.s_per_byte / 2
        out.append(
            MessageCosts(piece.from_bytes, fixed_cpu / 2, extra, fixed_cpu / 2, extra, latency, wait_s=wait)
        )
    return tuple(out)


def _spent(
    patterns: Sequence[dict], ranks: int, idle_ranks: int, polling_cores: int, pattern: str = "pingpong"
) -> list[tuple[int, float]]:
    """(size, CPU seconds per message) of `pattern` at `ranks`; where ranks poll, at most what the
    cores had per message (the rest was polling); none of the window's or the exchange's at a core
    per rank (nobody waits for a core there)."""
    rows = sorted(
        (p for p in patterns if p["pattern"] == pattern and p["ranks"] == ranks), key=lambda p: p["size"]
    )
    if pattern != "pingpong" and ranks == idle_ranks:
        return []
    if polling_cores and ranks != idle_ranks:
        return [
            (p["size"], min(p["cpu_s"], cores_per_message(p["time_s"], ranks, polling_cores))) for p in rows
        ]
    return [(p["size"], p["cpu_s"]) for p in rows]


def switch_s(
    patterns: Sequence[dict],
    rates: Rates,
    bounds: Sequence[int],
    ranks: int,
    idle_ranks: int,
    polling_cores: int,
) -> float:
    """A context switch at `ranks`: the exchange's CPU per message beyond the window's, small messages
    (in the exchange each message's receiver runs once for it; in the window once for eight), or 0
    where there is no window (or nobody waits for a core)."""
    window = _spent(patterns, ranks, idle_ranks, polling_cores, "window")
    exchange = _spent(patterns, ranks, idle_ranks, polling_cores, "pingping")
    if not window or not exchange:
        return 0.0
    first = [_residual_pieces(points, rates, bounds, ranks)[0].alpha_s for points in (exchange, window)]
    return max(0.0, first[0] - first[1])


def window_applies(transport: str) -> bool:
    """The window pattern prices a message and the exchange's beyond it a context switch over shared
    memory; over ZeroMQ (ipc, tcp) the I/O threads also batch the window's eight messages to one peer,
    which a collective's messages to different peers do not get, so there the exchange's CPU stands."""
    return transport == "shm"


def numpy_scale(patterns: Sequence[dict], ranks: int) -> float:
    """The numpy probe's time right after a message at `ranks` over its time in a loop (at least 1),
    or 1 for a calibration without the probe."""
    probe = [p for p in patterns if p["pattern"] == "numpy" and p["ranks"] == ranks]
    if not probe or not probe[0].get("hot_s"):
        return 1.0
    return max(1.0, probe[0]["time_s"] / probe[0]["hot_s"])


def host_model(
    record: dict, transport: str, num_ranks: int, size_bytes: float, cores: int | None = None
) -> HostModel:
    """The simulator's host for a collective of `size_bytes` on `num_ranks` ranks over `transport`,
    from a calibration record (models/calibration.py checks it first)."""
    cores = cores or record["machine"]["cores"]
    rates = Rates(record["host"]["rates"])
    entry = record["transports"][transport]
    measured = sorted({p["ranks"] for p in entry["patterns"]})
    idle = min(measured)
    ranks = idle if num_ranks <= cores else regime_ranks(measured, num_ranks)
    footprint = collective_footprint(size_bytes, num_ranks, cores)
    copy_s = 1.0 / rates.copy_bytes_per_s(footprint)
    sleeps = ranks != idle and any(p["ranks"] == ranks and p.get("sleeps") for p in entry["patterns"])
    polling_cores = cores if ranks != idle and not sleeps else 0
    ranges = tuple(
        MessageCosts(
            c.from_bytes,
            c.send_s,
            c.send_s_per_byte + copy_s,
            c.recv_s,
            c.recv_s_per_byte + copy_s,
            c.latency_s,
            wait_s=c.wait_s,
        )
        for c in message_costs(
            entry["patterns"], rates, entry["bounds"], ranks, idle, polling_cores, window_applies(transport)
        )
    )
    gamma = rates.gamma_bytes_per_s(footprint)
    return HostModel(
        ranges,
        cores,
        gamma,
        slice_s=record["host"]["slice_s"],
        memory_bytes_per_s=rates.memory_bytes_per_s(footprint),
        copy_demand=READ_WRITE * rates.copy_bytes_per_s(footprint),
        reduce_demand=READ_READ_WRITE * gamma,
        wake_s=record["host"].get("wake_s", 0.0) if sleeps else 0.0,
        copy_s_per_byte=1.0 / rates.copy_bytes_per_s(rank_footprint(size_bytes, num_ranks, cores)),
        message_copy_s_per_byte=copy_s,
        python_scale=PYTHON_SCALE,
        timed_python_s=record["host"].get("timed_python_s", 0.0),
        numpy_scale=numpy_scale(entry["patterns"], ranks),
        switch_s=switch_s(entry["patterns"], rates, entry["bounds"], ranks, idle, polling_cores)
        if window_applies(transport)
        else 0.0,
        migration_cost_s=record["host"].get("migration_cost_s", DEFAULT_MIGRATION_COST_S),
        stream_from_bytes=streams_from_bytes(num_ranks) if transport == "shm" else 0,
        stream_window_bytes=WINDOW_CELLS * CELL_BYTES if transport == "shm" else 0,
    )
