"""The simulator as one more transport: `Communicator`s over it run the real collectives in virtual time.

`SimWorld` holds the engine (virtual clock, one greenlet per rank) and the network (ports, CPUs);
`SimWorld.run(fn)` builds a `Communicator` per rank over a `SimTransport` and runs fn(comm) on
every rank, exactly as a launched run would, but in one process.

Two modes. With data, messages carry copies of the arrays and reductions really run, so results
can be checked exactly as in a real run (small N and sizes). Data-free, the inputs are phantom
arrays (playground.collectives.chunks.phantom: any length, one element of memory), messages carry
sizes, not bytes, and reductions only cost their virtual time: the cost of a simulation then
grows with the number of messages, not with bytes.
"""

import heapq
import math

import numpy as np

from playground.collectives.chunks import phantom
from playground.comm.communicator import Communicator
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, Outgoing
from playground.sim.engine import Engine, Proc
from playground.sim.network import Machine, Network
from playground.trace import Tracer

NO_SEGMENTS = 1 << 62  # the simulator's default segment: whole messages (Thakur's closed forms)
_U1 = np.dtype("u1")


class _SentAt:
    """A send's completion: when its last byte leaves the sender's port, in virtual time."""

    __slots__ = ("engine", "proc", "t")

    def __init__(self, engine: Engine, proc: Proc, t: float):
        self.engine, self.proc, self.t = engine, proc, t

    @property
    def done(self) -> bool:
        return self.engine.now >= self.t

    def wait(self, timeout_s: float) -> bool:
        self.engine.sleep_until(self.proc, self.t)
        return True


class SimMessage(Message):
    """A message in virtual time: `payload` is a copy of the array, or None when data-free."""

    __slots__ = ("world", "receiver")

    def array(self) -> np.ndarray:
        if self.payload is None:
            return phantom(self.count, self.dtype)
        return super().array()

    def copy_into(self, out: np.ndarray) -> None:
        if self.payload is not None:
            super().copy_into(out)

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        if self.payload is not None:
            super().reduce_into(target, ufunc, base)
        self.world.compute(self.receiver, target.nbytes / self.world.machine.gamma_bytes_per_s)


class SimTransport:
    """One simulated rank's side of the world."""

    name = "sim"
    segment_bytes = NO_SEGMENTS

    def __init__(self, world: "SimWorld", rank: int):
        self.world, self.rank = world, rank
        self.engine, self.net, self.procs = world.engine, world.net, world.engine.procs
        self.proc = self.procs[rank]

    def _post(self, dst: int, tag: int, kind: str, dtype, shape, nbytes: int, payload):
        engine = self.engine
        now = engine.now
        done, arrival = self.net.transmit(self.rank, dst, nbytes, now)
        msg = SimMessage(self.rank, tag, kind, dtype, shape, payload)
        msg.world, msg.receiver = self.world, self.procs[dst]
        engine.deliver(msg.receiver, arrival, msg)
        return COMPLETE if done <= now else _SentAt(engine, self.proc, done)

    def send(self, dst: int, tag: int, x: np.ndarray):
        payload = x.copy() if self.world.data else None
        return self._post(dst, tag, KIND_ARRAY, x.dtype, x.shape, x.nbytes, payload)

    def reserve(self, dst: int, count: int, dtype: np.dtype) -> Outgoing:
        return Outgoing(dst, np.empty(count, dtype) if self.world.data else phantom(count, dtype))

    def send_reserved(self, out: Outgoing, tag: int):
        x = out.array
        return self._post(
            out.dst, tag, KIND_ARRAY, x.dtype, x.shape, x.nbytes, x if self.world.data else None
        )

    def send_obj(self, dst: int, tag: int, body: bytes):
        return self._post(dst, tag, KIND_OBJ, _U1, (), len(body), body)

    def receive(self, timeout_ms: int) -> Message | None:
        proc, engine = self.proc, self.engine
        while True:
            inbox = proc.inbox
            if inbox and inbox[0][0] <= engine.now:
                return heapq.heappop(inbox)[2]
            if timeout_ms <= 0:
                return None
            engine.wait_for_message(proc, inbox[0][0] if inbox else None)

    def close(self) -> None:
        pass


class SimWorld:
    """A simulated machine and its ranks; `run(fn)` runs fn(comm) on every rank in virtual time."""

    def __init__(self, machine: Machine, data: bool = True):
        self.machine, self.data = machine, data
        self.engine = Engine(machine.num_ranks)
        self.net = Network(machine)

    def compute(self, proc: Proc, seconds: float) -> None:
        """`proc` (the running rank) works for `seconds` of CPU, on a free core."""
        if seconds > 0 and not math.isinf(seconds):
            self.engine.sleep_until(proc, self.net.cpu(self.engine.now, seconds))

    def run(self, fn, trace_dir=None, trace_messages: bool = True, timeout_s: float = 3600.0) -> list:
        """fn(comm) on every rank; their return values. With `trace_dir`, each rank's events go to
        rank-<r>.jsonl there, stamped in virtual microseconds (per message only if `trace_messages`)."""
        n = self.machine.num_ranks
        hosts = [f"node{self.machine.node_of(r)}" for r in range(n)]
        comms = []
        for rank in range(n):
            tracer = Tracer(
                rank,
                None if trace_dir is None else trace_dir / f"rank-{rank}.jsonl",
                enabled=trace_dir is not None,
                clock_ns=self.engine.clock_ns,
                messages=trace_messages,
            )
            transport = SimTransport(self, rank)
            comms.append(Communicator(rank, n, transport, tracer=tracer, timeout_s=timeout_s, hosts=hosts))
        try:
            return self.engine.run(lambda rank: fn(comms[rank]))
        finally:
            for comm in comms:
                comm.tracer.flush()
