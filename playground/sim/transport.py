"""The simulator as one more transport: `Communicator`s over it run the real collectives in virtual time.

`SimWorld` holds the engine (a greenlet and a clock per rank) and the network (ports, CPUs);
`SimWorld.run(fn)` builds a `Communicator` per rank over a `SimTransport` and runs fn(comm) on
every rank, exactly as a launched run would, but in one process.

A send never blocks: it posts the message's transmission as an event at the sender's time; the
event reserves the ports and delivers the message, stamped with its arrival time, to the
receiver's inbox. A received message is taken at its arrival: `landed()` (the communicator calls
it once it has matched the message; every way of reading the payload calls it too) moves the
receiver's clock to the arrival if it is behind. A send completes when its last byte has left.

Two modes. With data, messages carry copies of the arrays and reductions really run, so results
can be checked exactly as in a real run (small N and sizes). Data-free, the inputs are phantom
arrays (playground.collectives.chunks.phantom: any length, one element of memory), messages carry
sizes, not bytes, and reductions only cost their virtual time: the cost of a simulation then
grows with the number of messages, not with bytes.
"""

import math

import numpy as np

from playground.collectives.chunks import phantom
from playground.comm.communicator import Communicator
from playground.comm.transport import KIND_ARRAY, KIND_OBJ, Message, Outgoing
from playground.sim.engine import Engine, Proc
from playground.sim.network import Machine, Network
from playground.trace import Tracer

NO_SEGMENTS = 1 << 62  # the simulator's default segment: whole messages (Thakur's closed forms)
_U1 = np.dtype("u1")


class SimMessage(Message):
    """A message in virtual time: `payload` is a copy of the array, or None when data-free. It is
    also its own send's completion (`done`, `wait`): complete when its last byte has left the
    sender's port, `sent_at`, known once its transmission event has run."""

    __slots__ = ("world", "sender", "receiver", "nbytes", "arrival", "sent_at", "waiter")

    def __init__(
        self, world, sender: Proc, receiver: Proc, tag: int, kind: str, dtype, shape, nbytes, payload
    ):
        self.src, self.tag, self.kind, self.dtype, self.shape, self.payload = (
            sender.rank,
            tag,
            kind,
            dtype,
            shape,
            payload,
        )
        self.world, self.sender, self.receiver, self.nbytes = world, sender, receiver, nbytes
        self.arrival = self.sent_at = self.waiter = None

    # -- as the receiver's message ---------------------------------------------------------
    def landed(self) -> None:
        receiver = self.receiver
        if receiver.t < self.arrival:
            receiver.t = self.arrival

    def array(self) -> np.ndarray:
        self.landed()
        if self.payload is None:
            return phantom(self.count, self.dtype)
        return super().array()

    def copy_into(self, out: np.ndarray) -> None:
        self.landed()
        if self.payload is not None:
            super().copy_into(out)

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        receiver = self.receiver
        if receiver.t < self.arrival:  # landed()
            receiver.t = self.arrival
        if self.payload is not None:
            super().reduce_into(target, ufunc, base)
        seconds = target.nbytes * self.world.reduce_s_per_byte
        if seconds:
            self.world.compute(receiver, seconds)

    def obj(self):
        self.landed()
        return super().obj()

    def release(self) -> None:
        self.landed()

    # -- as the sender's completion --------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.sent_at is not None and self.sent_at <= self.sender.t

    def wait(self, timeout_s: float) -> bool:
        sender = self.sender
        if self.sent_at is None:
            self.waiter = sender
            self.world.engine.block(sender)
        if sender.t < self.sent_at:
            sender.t = self.sent_at
        return True


class SimTransport:
    """One simulated rank's side of the world."""

    name = "sim"
    segment_bytes = NO_SEGMENTS

    def __init__(self, world: "SimWorld", rank: int):
        self.world, self.rank = world, rank
        self.engine, self.procs = world.engine, world.engine.procs
        self.proc = self.procs[rank]
        self._transmit = world.transmit
        self._data = world.data

    def _post(self, dst: int, tag: int, kind: str, dtype, shape, nbytes: int, payload) -> SimMessage:
        proc, engine = self.proc, self.engine
        msg = SimMessage(self.world, proc, self.procs[dst], tag, kind, dtype, shape, nbytes, payload)
        t = proc.t
        events = engine.events
        if not engine.starting and (not events or t <= events[0][0]):
            engine.now = t  # nothing can happen before t any more: transmit right away
            woken = self._transmit(msg)
            if woken is not None:
                engine.wake_later(woken)
        else:
            engine.post(t, self._transmit, msg)
        return msg

    def send(self, dst: int, tag: int, x: np.ndarray):
        return self._post(dst, tag, KIND_ARRAY, x.dtype, x.shape, x.nbytes, x.copy() if self._data else None)

    def reserve(self, dst: int, count: int, dtype: np.dtype) -> Outgoing:
        return Outgoing(dst, np.empty(count, dtype) if self._data else phantom(count, dtype))

    def send_reserved(self, out: Outgoing, tag: int):
        x = out.array
        return self._post(out.dst, tag, KIND_ARRAY, x.dtype, x.shape, x.nbytes, x if self._data else None)

    def send_obj(self, dst: int, tag: int, body: bytes):
        return self._post(dst, tag, KIND_OBJ, _U1, (), len(body), body)

    def receive(self, timeout_ms: int) -> Message | None:
        proc = self.proc
        inbox = proc.inbox
        if not inbox:
            if timeout_ms <= 0:
                return None
            proc.waiting = True
            self.engine.block(proc)  # until a delivery wakes it
            proc.waiting = False
        return inbox.popleft()

    def close(self) -> None:
        pass


class SimWorld:
    """A simulated machine and its ranks; `run(fn)` runs fn(comm) on every rank in virtual time."""

    def __init__(self, machine: Machine, data: bool = True):
        self.machine, self.data = machine, data
        self.engine = Engine(machine.num_ranks)
        self.net = Network(machine)
        self._shared_cpus = machine.cores is not None
        gamma = machine.gamma_bytes_per_s
        self.reduce_s_per_byte = 0.0 if math.isinf(gamma) else 1.0 / gamma  # a reduction's CPU time per byte

    def time_of(self, rank: int) -> float:
        """Rank `rank`'s virtual time, seconds."""
        return self.engine.procs[rank].t

    def transmit(self, msg: SimMessage):
        """The event of a message's transmission: reserve its ports, deliver it to the receiver
        stamped with its arrival, complete the send; the rank to run next, if one was waiting."""
        engine = self.engine
        engine.num_messages += 1
        receiver = msg.receiver
        msg.sent_at, msg.arrival = self.net.transmit(msg.src, receiver.rank, msg.nbytes, engine.now)
        receiver.inbox.append(msg)
        woken = None
        if receiver.waiting:
            receiver.waiting = False  # woken once, even if more messages arrive before it runs
            woken = receiver
        waiter = msg.waiter
        if waiter is not None:  # the sender waits for this send to complete
            msg.waiter = None
            if woken is None:
                return waiter
            engine.wake_later(waiter)
        return woken

    def compute(self, proc: Proc, seconds: float) -> None:
        """`proc` (the running rank) works for `seconds` of CPU (on a free core, if they are shared)."""
        if not self._shared_cpus:
            proc.t += seconds
            return
        self.engine.post(proc.t, self._cpu, (proc, seconds))
        self.engine.block(proc)

    def _cpu(self, arg) -> Proc:
        proc, seconds = arg
        proc.t = self.net.cpu(self.engine.now, seconds)
        return proc

    def run(self, fn, trace_dir=None, trace_messages: bool = True, timeout_s: float = 3600.0) -> list:
        """fn(comm) on every rank; their return values. With `trace_dir`, each rank's events go to
        rank-<r>.jsonl there, stamped in its virtual microseconds (per message if `trace_messages`)."""
        n = self.machine.num_ranks
        hosts = [f"node{self.machine.node_of(r)}" for r in range(n)]
        comms = []
        for rank in range(n):
            proc = self.engine.procs[rank]
            tracer = Tracer(
                rank,
                None if trace_dir is None else trace_dir / f"rank-{rank}.jsonl",
                enabled=trace_dir is not None,
                clock_ns=lambda proc=proc: round(proc.t * 1e9),
                messages=trace_messages,
            )
            transport = SimTransport(self, rank)
            comms.append(Communicator(rank, n, transport, tracer=tracer, timeout_s=timeout_s, hosts=hosts))
        try:
            return self.engine.run(lambda rank: fn(comms[rank]))
        finally:
            for comm in comms:
                comm.tracer.flush()
