"""Messages on one host without ZeroMQ: bytes in /dev/shm rings, notices through named pipes.

As NCCL's SHM transport does within a node. Arrays from `min_bytes` up (or too large for one
pipe record) are written into the sender's ring to the receiver (shm.py) and announced by a
descriptor; everything else (small arrays, JSON bodies) travels inline in the record. Every record
goes into the receiver's named pipe (pipes.py), which wakes it directly: one wake-up per message
instead of ZeroMQ's three thread hops.

A ring message is released in arrival order, whatever order the program receives in (shm.py);
a parked one can `detach`, copying its bytes out so the sender gets the space back. A post finds
NoRoom when the pipe or the ring is full; then nothing was sent (a ring slot whose descriptor did
not fit the pipe is taken back), and the communicator waits while taking in what arrives.
"""

import numpy as np

from playground.comm import pipes, wire
from playground.comm.shm import ShmChannels
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, NoRoom, Outgoing

SEGMENT_BYTES = (
    4 << 20
)  # a ring message costs a descriptor, not a trip through the kernel: +13-16% busbw vs 1 MiB
PIPE_FULL = NoRoom("its pipe")
RING_FULL = NoRoom("the shared-memory ring to it")
_U1 = np.dtype("u1")


class _RingMessage(Message):
    """An array (or JSON body) that is still in the sender's ring; `release` hands the space back."""

    __slots__ = ("channels", "end")

    def __init__(self, src, tag, kind, dtype, shape, view: np.ndarray, channels: ShmChannels, end: int):
        super().__init__(src, tag, kind, dtype, shape, view)
        self.channels, self.end = channels, end

    def array(self) -> np.ndarray:
        arr = self.payload.view(self.dtype)
        return arr if len(self.shape) == 1 else arr.reshape(self.shape)

    def owned_array(self) -> np.ndarray:
        arr = self.array().copy()
        self.release()
        return arr

    def obj(self):
        self.payload = self.payload.tobytes()
        self.release()
        return super().obj()

    def release(self) -> None:
        if self.channels is not None:
            self.channels.release(self.src, self.end)
            self.channels = None

    def detach(self) -> None:
        if self.channels is not None:
            self.payload = self.payload.copy()
            self.release()


class ShmTransport:
    """One rank's rings (`channels`) and pipe inboxes; arrays below `min_bytes` go inline."""

    name = "shm"
    segment_bytes = SEGMENT_BYTES

    def __init__(self, rank: int, channels: ShmChannels, inboxes: pipes.Inboxes, min_bytes: int):
        self.rank = rank
        self.channels, self.inboxes, self.min_bytes = channels, inboxes, min_bytes

    def _inline_fits(self, nbytes: int, ndim: int) -> bool:
        return nbytes < self.min_bytes and nbytes <= pipes.MAX_RECORD - wire.header_size(ndim)

    def send(self, dst: int, tag: int, x: np.ndarray):
        if self._inline_fits(x.nbytes, x.ndim):
            return (
                COMPLETE if self.inboxes.try_send(dst, wire.encode_inline(self.rank, tag, x)) else PIPE_FULL
            )
        slot = self.channels.try_alloc(dst, x.nbytes)
        if slot is None:
            return RING_FULL
        view, descriptor = slot
        np.copyto(view.view(x.dtype).reshape(x.shape), x)  # any layout
        record = wire.encode_header(self.rank, tag, wire.KIND_SHM, x.dtype, x.shape) + descriptor
        if self.inboxes.try_send(dst, record):
            return COMPLETE
        self.channels.undo_alloc(dst)
        return PIPE_FULL

    def reserve(self, dst: int, count: int, dtype: np.dtype):
        nbytes = count * dtype.itemsize
        if self._inline_fits(nbytes, 1):
            return Outgoing(dst, np.empty(count, dtype))
        slot = self.channels.try_alloc(dst, nbytes)
        if slot is None:
            return RING_FULL
        view, descriptor = slot
        return Outgoing(dst, view.view(dtype), descriptor)

    def send_reserved(self, out: Outgoing, tag: int):
        if out.token is None:
            return self.send(out.dst, tag, out.array)
        record = (
            wire.encode_header(self.rank, tag, wire.KIND_SHM, out.array.dtype, out.array.shape) + out.token
        )
        return COMPLETE if self.inboxes.try_send(out.dst, record) else PIPE_FULL

    def send_obj(self, dst: int, tag: int, body: bytes):
        header = wire.encode_header(self.rank, tag, wire.KIND_JSON, _U1, ())
        if len(header) + len(body) <= pipes.MAX_RECORD:
            return COMPLETE if self.inboxes.try_send(dst, header + body) else PIPE_FULL
        slot = self.channels.try_alloc(dst, len(body))
        if slot is None:
            return RING_FULL
        view, descriptor = slot
        view[:] = np.frombuffer(body, dtype=np.uint8)
        if self.inboxes.try_send(
            dst, wire.encode_header(self.rank, tag, wire.KIND_JSON_SHM, _U1, ()) + descriptor
        ):
            return COMPLETE
        self.channels.undo_alloc(dst)
        return PIPE_FULL

    def receive(self, timeout_ms: int) -> Message | None:
        record = self.inboxes.next_record(timeout_ms)
        if record is None:
            return None
        src, tag, kind, dtype, shape, payload = wire.decode_record(record)
        if kind == wire.KIND_INLINE:
            return Message(src, tag, KIND_ARRAY, dtype, shape, payload)
        if kind == wire.KIND_JSON:
            return Message(src, tag, KIND_OBJ, dtype, shape, payload)
        # Registered on arrival: ring space is handed back in arrival order, whatever the tag.
        view, end = self.channels.arrived(src, payload)
        kind = KIND_ARRAY if kind == wire.KIND_SHM else KIND_OBJ
        return _RingMessage(src, tag, kind, dtype, shape, view, self.channels, end)

    def close(self) -> None:
        self.channels.close()
        self.inboxes.close()
