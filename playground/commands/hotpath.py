"""`python -m playground.commands.hotpath`: the Python work of one collective call, without the waiting.

A small all-reduce on one host is bound by the software on its path, not by the wire: two cores
exchange 8 bytes through shared memory in well under a microsecond (the mailbox ping-pong), while
our all-reduce runs a few dozen Python functions per rank. To see that work alone, this runs every
rank of a world as a greenlet in one thread, over the real transport (shared-memory mailboxes, or
ZeroMQ sockets): when a rank's receive finds nothing, the next rank runs. The CPU time per call is
then the ranks' own work (Python, numpy, the transport), free of sleeps, wake-ups and the
scheduler, and the count of Python-level calls is exact, whatever else runs on the machine.

    python -m playground.commands.hotpath                       # 2 ranks, 8 B, rd, shm, traced as in a run
    python -m playground.commands.hotpath --profile             # and the functions that take the time
    python -m playground.commands.hotpath --ranks 8 --algo tree --size 4KiB --transport ipc
"""

import cProfile
import pstats
import shutil
import tempfile
import time

import greenlet
import numpy as np
import zmq

from playground.collectives import ReduceOp, allreduce
from playground.comm.communicator import Communicator
from playground.comm.registry import BY_NAME, IN_PROCESS
from playground.comm.world import open_world
from playground.core.argparser import OneLineParser
from playground.core.sizes import parse_size
from playground.tracing.trace import Tracer


class _Cooperative:
    """A transport whose blocking receive lets the other ranks run instead of waiting. The posts
    are the inner transport's own bound methods (no lookup through a wrapper on the path)."""

    def __init__(self, inner, ranks: list):
        self.inner, self.ranks = inner, ranks
        self.name, self.segment_bytes = inner.name, inner.segment_bytes
        self.send, self.reserve, self.send_reserved = inner.send, inner.reserve, inner.send_reserved
        self.send_obj, self.close = inner.send_obj, inner.close
        if hasattr(inner, "land"):  # shm: landing (and exchanging) small arrays natively
            self.land = self._land
            self.exchange = lambda dst, src, tag, buf, ufunc, timeout_ms: inner.exchange(
                dst, src, tag, buf, ufunc, 0
            )

    def receive(self, timeout_ms: int):
        msg = self.inner.receive(0)
        while msg is None and timeout_ms > 0:
            self.ranks[0].switch()  # the scheduler greenlet runs the next rank
            msg = self.inner.receive(0)
        return msg

    def _land(self, src, tag, target, ufunc, base, timeout_ms: int):
        got = self.inner.land(src, tag, target, ufunc, base, 0)
        while got is None and timeout_ms > 0:
            self.ranks[0].switch()
            got = self.inner.land(src, tag, target, ufunc, base, 0)
        return got


def measure(
    ranks: int = 2,
    size_bytes: int = 8,
    algorithm: str = "rd",
    transport: str = "shm",
    calls: int = 5000,
    traced: bool | str = True,
    profile: cProfile.Profile | None = None,
    flight_entries: int | None = None,
) -> float:
    """CPU microseconds per rank per all-reduce of `size_bytes` float32 (MAX, in place). `traced`:
    True records what a run records (phases and one event per message), "phases" what `bench`
    records (phases, no message events), False nothing. `flight_entries`: the flight recorder's
    ring (None: an in-process world's default; 0: none)."""
    directory = tempfile.mkdtemp(prefix="playground-hotpath-", dir="/dev/shm")
    ctx = zmq.Context() if BY_NAME[transport].uses_zmq else None
    transports = open_world(transport, ranks, directory, ctx)
    try:
        scheduler: list = [None]
        comms = [
            Communicator(
                r,
                ranks,
                _Cooperative(t, scheduler),
                tracer=Tracer(r, None, enabled=bool(traced), messages=traced is True),
                flight_entries=flight_entries,
            )
            for r, t in enumerate(transports)
        ]
        x = [np.ones(max(1, size_bytes // 4), np.float32) for _ in range(ranks)]

        def body(r: int):
            comm, buf = comms[r], x[r]
            for _ in range(calls):
                allreduce(comm, buf, ReduceOp.MAX, algorithm, inplace=True)
                comm.tracer._events.clear()  # what a run flushes between iterations

        workers = [greenlet.greenlet(lambda r=r: body(r)) for r in range(ranks)]
        scheduler[0] = greenlet.getcurrent()
        if profile is not None:
            profile.enable()
        t0 = time.thread_time()
        while not all(w.dead for w in workers):
            for w in workers:
                if not w.dead:
                    w.switch()
        cpu = time.thread_time() - t0
        if profile is not None:
            profile.disable()
        return cpu / calls / ranks * 1e6
    finally:
        for t in transports:
            t.close()
        if ctx is not None:
            ctx.term()
        shutil.rmtree(directory, ignore_errors=True)


def python_calls(stats: pstats.Stats, calls: int, ranks: int) -> float:
    """Python-level calls per rank per all-reduce, this module's own frames left out."""
    # pstats keeps its table and total as plain attributes, which typeshed does not declare
    table: dict = stats.stats  # type: ignore[attr-defined]
    total: int = stats.total_calls  # type: ignore[attr-defined]
    own = sum(v[1] for k, v in table.items() if k[0] == __file__ or "greenlet" in str(k[2]))
    return (total - own) / calls / ranks


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m playground.commands.hotpath", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size", default="8", help="bytes of float32 per rank (default 8)")
    ap.add_argument("--algo", default="rd", help="all-reduce algorithm (default rd)")
    ap.add_argument("--transport", default="shm", choices=IN_PROCESS)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5, help="the best of this many runs is printed")
    ap.add_argument("--profile", action="store_true", help="also print the functions that take the time")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    what = f"{args.algo} all-reduce of {size} B, {args.ranks} ranks over {args.transport}"
    labels: dict[bool | str, str] = {
        False: "tracing off",
        "phases": "as bench traces (phases, no per-message events)",
        True: "with per-message trace events (as in a run)",
    }
    for traced, label in labels.items():
        best = min(
            measure(args.ranks, size, args.algo, args.transport, args.calls, traced)
            for _ in range(args.repeats)
        )
        pr = cProfile.Profile()
        measure(args.ranks, size, args.algo, args.transport, min(args.calls, 2000), traced, pr)
        stats = pstats.Stats(pr)
        n_calls = python_calls(stats, min(args.calls, 2000), args.ranks)
        print(f"{what}, {label}: {best:.2f} us of CPU and {n_calls:.0f} Python calls per rank per call")
        if args.profile and traced:
            stats.sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
