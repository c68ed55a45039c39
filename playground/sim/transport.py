"""The simulator as one more transport: `Communicator`s over it run the real collectives in virtual time.

`SimWorld` holds the engine (a greenlet and a clock per rank) and the network (ports, CPUs);
`SimWorld.run(fn)` builds a `Communicator` per rank over a `SimTransport` and runs fn(comm) on
every rank, exactly as a launched run would, but in one process.

A send never blocks: it posts the message's transmission as an event at the sender's time (or
transmits it at once when no event is due before that time); the transmission reserves the ports
and delivers the message, stamped with its arrival time, to the receiver's inbox. A received
message is taken at its arrival: `landed()` (the communicator calls it once it has matched the
message; every way of reading the payload calls it too) moves the receiver's clock to the arrival
if it is behind. A send completes when its last byte has left: the message is also the send's
completion (`done`, `wait`).

Two modes. With data, messages carry copies of the arrays and reductions really run, so results
can be checked exactly as in a real run (small N and sizes). Data-free, the inputs are phantom
arrays (playground.collectives.chunks.phantom: any length, one element of memory), messages carry
sizes, not bytes, and reductions only cost their virtual time: the cost of a simulation then
grows with the number of messages, not with bytes.

The transport and its messages are the native module's (native/sim_transport.c): a message
posted, moved and taken costs no Python call of the simulator's own, only the communicator's and
the algorithm's.
"""

import math

import numpy as np
from _playground_native import SimMessage
from _playground_native import SimTransport as _NativeTransport

from playground.collectives import chunks
from playground.comm.communicator import Communicator
from playground.comm.transport import KIND_ARRAY, Message
from playground.sim.engine import Engine
from playground.sim.network import Machine, Network
from playground.tracing.trace import Tracer

NO_SEGMENTS = 1 << 62  # the simulator's default segment: whole messages (Thakur's closed forms)


class SimTransport(_NativeTransport):
    """One simulated rank's side of the world: `SimTransport(engine, rank)` data-free, or
    `SimTransport(engine, rank, SimDataMessage, np.empty)` carrying data."""

    __slots__ = ()
    name = "sim"
    segment_bytes = NO_SEGMENTS


class StreamingSimTransport(SimTransport):
    """A rank's side on a host whose transport streams the swaps of arrays from `stream_from_bytes`
    up (the shm transport's `exchange`: comm/shm_stream.py): such a `sendrecv_reduce` posts its half
    with `send_streamed` (half a copy in; the peer's reduction reads it from cache), then the
    communicator reduces the peer's half as usual. A world makes its own subclass with the size."""

    __slots__ = ()
    stream_from_bytes = 0

    def exchange(self, dst: int, src: int, tag: int, buf: np.ndarray, ufunc, timeout_ms: int):
        if ufunc is None or dst != src or buf.nbytes < self.stream_from_bytes:
            return None  # not a stream: the communicator sends and receives the usual way
        self.send_streamed(dst, tag, buf)
        return False  # posted; nothing received yet


class SimDataMessage(SimMessage):
    """A message that carries a copy of its array (`payload`): read, copied and reduced by the
    ordinary Message code, taken at its arrival and its reduction timed by SimMessage's."""

    __slots__ = ()

    def array(self) -> np.ndarray:
        self.landed()
        return self.payload if self.kind == KIND_ARRAY else Message.array(self)

    def owned_array(self) -> np.ndarray:
        SimMessage.copy_into(self, None)  # its time: the receiving CPU and a copy out (with host costs)
        return self.array()

    def copy_into(self, out: np.ndarray) -> None:
        Message.copy_into(self, out)  # array(), which lands it; the copy; release()
        SimMessage.copy_into(self, out)

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        Message.reduce_into(self, target, ufunc, base)
        SimMessage.reduce_into(self, target, ufunc, base)  # its time on the receiver's CPU


class SimWorld:
    """A simulated machine and its ranks; `run(fn)` runs fn(comm) on every rank in virtual time.
    With `fold` (fold.symmetry's, data-free) rank 0 runs for all of them."""

    def __init__(self, machine: Machine, data: bool = True, fold: int = 0):
        self.machine, self.data, self.folded = machine, data, bool(fold)
        self.net = Network(machine, time_python=not data)
        gamma = machine.gamma_bytes_per_s
        reduce_s_per_byte = 0.0 if math.isinf(gamma) else 1.0 / gamma  # a reduction's CPU time per byte
        self.engine = Engine(self.net, reduce_s_per_byte, fold)
        streams = machine.host.stream_from_bytes if machine.host is not None else 0
        self.transport_type = (
            type("SimTransport", (StreamingSimTransport,), {"__slots__": (), "stream_from_bytes": streams})
            if streams
            else SimTransport
        )

    def time_of(self, rank: int) -> float:
        """Rank `rank`'s virtual time, seconds."""
        return self.engine.time_of(0 if self.folded else rank)

    @property
    def num_messages(self) -> int:
        """Messages simulated: when folded, each one rank 0 ran stands for one per rank."""
        return self.engine.num_messages * (self.machine.num_ranks if self.folded else 1)

    def run(self, fn, trace_dir=None, trace_messages: bool = True, timeout_s: float = 3600.0) -> list:
        """fn(comm) on every rank; their return values. With `trace_dir`, each rank's events go to
        rank-<r>.jsonl there, stamped in its virtual microseconds (per message if `trace_messages`)."""
        n, engine = self.machine.num_ranks, self.engine
        hosts = [f"node{self.machine.node_of(r)}" for r in range(n)]
        carry = (SimDataMessage, np.empty) if self.data else ()
        untraced = Tracer(0, None, enabled=False)  # one for every rank: the communicator asks it per message
        comms = []
        for rank in range(1 if self.folded else n):
            tracer = untraced
            if trace_dir is not None:
                tracer = Tracer(
                    rank,
                    trace_dir / f"rank-{rank}.jsonl",
                    clock_ns=lambda rank=rank: round(engine.time_of(rank) * 1e9),
                    messages=trace_messages,
                )
            transport = self.transport_type(engine, rank, *carry)
            comms.append(
                Communicator(
                    rank, n, transport, tracer=tracer, timeout_s=timeout_s, hosts=hosts, flight_entries=0
                )
            )
        host = self.machine.host
        if host is not None and not self.data:  # a phantom's moves cost a host what the real ones do
            extra = max(0.0, host.numpy_scale - 1.0)  # beyond the call's timed Python, charged already

            def local_copy(nbytes: int, call_s: float, local=engine.local_copy) -> None:
                local(nbytes, call_s * extra)

            chunks.local_copy = local_copy
        try:
            results = engine.run(lambda rank: fn(comms[rank]))
            return results * n if self.folded else results
        finally:
            chunks.local_copy = None
            for comm in comms:
                comm.tracer.flush()
