"""An in-process transport: one thread per rank, a queue per rank instead of sockets.

`comm.world.run_local` runs a function on N threads, each with a real `Communicator` over this
transport (or any other kind), so the production matching, deadlines and abort code run too: large
correctness grids are fast (no processes) and a schedule can be tried without a launcher. Messages
are copied at send time (the sender may reuse its array at once, as with a buffered MPI send).
Real runs go over ZeroMQ or shared memory.
"""

import queue

import numpy as np

from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, PlainReserve

SEGMENT_BYTES = 1 << 20
_U1 = np.dtype("u1")


class LocalTransport(PlainReserve):
    """Rank `rank`'s side of `inboxes` (one queue per rank, shared by all threads)."""

    name = "local"
    segment_bytes = SEGMENT_BYTES

    def __init__(self, rank: int, inboxes: list[queue.SimpleQueue[Message]]):
        self.rank, self.inboxes = rank, inboxes

    def send(self, dst: int, tag: int, x: np.ndarray):
        arr = x.copy()
        arr.flags.writeable = False
        self.inboxes[dst].put(Message(self.rank, tag, KIND_ARRAY, arr.dtype, arr.shape, arr))
        return COMPLETE

    def send_obj(self, dst: int, tag: int, body: bytes):
        self.inboxes[dst].put(Message(self.rank, tag, KIND_OBJ, _U1, (), body))
        return COMPLETE

    def receive(self, timeout_ms: int) -> Message | None:
        try:
            if timeout_ms <= 0:
                return self.inboxes[self.rank].get_nowait()
            return self.inboxes[self.rank].get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass
