"""Messages over ZeroMQ (ipc:// on one host, tcp:// across hosts).

Each rank binds one PULL socket and lazily connects one PUSH socket to each peer it sends to;
high-water marks are off, so a post never blocks (a ring step cannot deadlock) and never finds
NoRoom. ZeroMQ keeps each sender's messages in order.

A message is a header frame (wire.py) and a payload: small arrays travel inline in the header's
frame (one frame is cheaper than two); from 64 KiB up the array's buffer is its own frame, sent
zero-copy (the completion is ZeroMQ's tracker) and read lazily: when the communicator asks for
the message with an array to land it in, `copy_into` receives the frame straight into that array
(`recv_into`); otherwise the frame is taken zero-copy before the next receive.

Anyone who can reach a rank's socket can send it anything, so every frame is checked: a header that
wire.py rejects, a sender that is not a rank of the run, an inline or object message with frames
after it, an array or object header with no payload frame, a payload of the wrong size. Each is a
WireError naming this rank, its socket and what was wrong (the rest of the bad message is read and
dropped), raised by `receive` or by reading the payload; the communicator fails the rank with it.

On one host (ipc) ZeroMQ still carries every message, but the bytes of arrays from
`ring_min_bytes` up go through a shared-memory ring per (sender, receiver) (shm.py), as NCCL's
SHM transport does inside a node: the frame is a 24-byte descriptor. Through a socket each byte
is copied into the kernel and out again (and a reduction reads it a third time); through the
ring it is written once (a forwarded reduction straight into the ring) and read once. The
message is the header frame and a descriptor frame. When the ring to a peer is full the array
goes as a frame after all, so a post still never waits. An array the caller lends (`lend`: an
all-to-all's block, unchanged until its send completes) is not copied into the ring at all: the
receiver reads it from the sender's memory (shm_lend.py), and the descriptor frame names it.
"""

import os
from typing import cast

import numpy as np
import zmq

from playground.comm import shm_lend, wire
from playground.comm.shm import DESCRIPTOR_BYTES, ShmChannels
from playground.comm.shm_lend import MARKER_BYTES, PAYLOAD_BYTES, peer_reads_allowed
from playground.comm.shm_transport import RingMessage
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, Outgoing, PlainReserve
from playground.core.errors import WireError

ZERO_COPY_MIN_BYTES = 64 * 1024  # below this, copying is cheaper than tracking a zero-copy frame
SOCKET_BUFFER_BYTES = (
    4 << 20
)  # kernel socket buffers: fewer wake-ups per large message (net.core.*mem_max caps it)
SEGMENT_BYTES = 1 << 20  # over ZeroMQ 128 KiB-2 MiB segments measured the same; 1 MiB it is
RING_SEGMENT_BYTES = 4 << 20  # with rings a segment costs a descriptor's trip, as on the shm path
RING_MIN_BYTES = 64 * 1024  # on one host, arrays from here up go through a shared-memory ring
_U1 = np.dtype("u1")


def as_bytes(x: np.ndarray) -> np.ndarray:
    """`x` as a buffer ZeroMQ can take: itself, or its bytes where the buffer protocol has no letter
    for its dtype (bfloat16's, from ml_dtypes)."""
    return x.view(np.uint8) if x.dtype.kind == "V" else x


class _Tracked:
    """A zero-copy send's completion: ZeroMQ's tracker says when the frame has left."""

    __slots__ = ("tracker",)

    def __init__(self, tracker: zmq.MessageTracker):
        self.tracker = tracker

    @property
    def done(self) -> bool:
        return self.tracker.done

    def wait(self, timeout_s: float) -> bool:
        try:
            self.tracker.wait(timeout_s)
            return True
        except zmq.NotDone:
            return False


class _FrameMessage(Message):
    """An array whose bytes are still the next frame on the socket (read at most once)."""

    __slots__ = ("sock", "transport")
    sock: zmq.Socket | None  # None once the frame was read

    def __init__(self, transport: "ZmqTransport", src: int, tag: int, dtype: np.dtype, shape: tuple):
        super().__init__(src, tag, KIND_ARRAY, dtype, shape, None)
        self.sock, self.transport = transport._data, transport

    def fetch(self) -> None:
        """Take the frame off the socket, zero-copy (before anything else is received)."""
        if self.sock is not None:
            sock, self.sock = self.sock, None
            self.payload = sock.recv(copy=False).buffer
            self._check(len(self.payload), sock)

    def _check(self, nbytes: int, sock: zmq.Socket) -> None:
        expected = self.count * self.dtype.itemsize
        if nbytes != expected or sock.get(zmq.RCVMORE):
            extra = self.transport.discard_rest(bool(sock.get(zmq.RCVMORE)))
            raise self.transport.wire_error(
                f"from rank {self.src} tag {self.tag}: a payload of {nbytes} bytes for a {self.dtype} array of "
                f"shape {self.shape} ({expected} bytes)" + (f", then {extra} more frames" if extra else "")
            )

    def array(self) -> np.ndarray:
        self.fetch()
        return super().array()

    def copy_into(self, out: np.ndarray) -> None:
        if (
            self.sock is not None
            and out.dtype == self.dtype
            and out.size == self.count
            and out.flags.c_contiguous
        ):
            sock, self.sock = self.sock, None
            # Lands in the caller's buffer: no extra copy. (An ndarray is a buffer; numpy's stubs say
            # so only from Python 3.12, where the buffer protocol got its Python-level type.)
            self._check(sock.recv_into(as_bytes(out)), sock)  # type: ignore[arg-type]
            return
        super().copy_into(out)


class ZmqTransport(PlainReserve):
    """One rank's ZeroMQ sockets: its bound PULL `data` socket and a PUSH per peer it sends to;
    with `channels` (one host), the shared-memory rings that large arrays' bytes go through."""

    def __init__(
        self,
        rank: int,
        ctx: zmq.Context,
        data: zmq.Socket,
        endpoints: list[str],
        name: str,
        channels: ShmChannels | None = None,
        ring_min_bytes: int = RING_MIN_BYTES,
    ):
        self.rank, self.name = rank, name
        self.segment_bytes = SEGMENT_BYTES if channels is None else RING_SEGMENT_BYTES
        self._ctx, self._data, self._endpoints = ctx, data, endpoints
        self._push: dict[int, zmq.Socket] = {}
        self._timeout_ms: int | None = None  # the data socket's RCVTIMEO, set only when it changes
        self._num_ranks = len(endpoints)
        self._unread: _FrameMessage | None = None
        self.channels, self.ring_min_bytes = channels, ring_min_bytes
        self.lends = channels is not None and peer_reads_allowed()  # else `lend` is `send`

    def _socket_to(self, dst: int) -> zmq.Socket:
        sock = self._ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
        sock.connect(self._endpoints[dst])
        self._push[dst] = sock
        return sock

    def send(self, dst: int, tag: int, x: np.ndarray):
        sock = self._push.get(dst) or self._socket_to(dst)
        if x.nbytes < ZERO_COPY_MIN_BYTES:
            sock.send(wire.encode_inline(self.rank, tag, x))
            return COMPLETE
        if self.channels is not None and x.nbytes >= self.ring_min_bytes:
            slot = self.channels.try_alloc(dst, x.nbytes)
            if slot is not None:  # the bytes go through shared memory, their descriptor through ZeroMQ
                view, descriptor = slot
                np.copyto(view.view(x.dtype).reshape(x.shape), x)  # any layout
                sock.send(wire.encode_header(self.rank, tag, wire.KIND_SHM, x.dtype, x.shape), zmq.SNDMORE)
                sock.send(descriptor)
                return COMPLETE
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_ARRAY_FRAME, x.dtype, x.shape), zmq.SNDMORE)
        tracker = sock.send(as_bytes(x), copy=False, track=True)  # type: ignore[call-overload]  # a buffer
        return _Tracked(tracker)

    def lend(self, dst: int, tag: int, x: np.ndarray):
        """`send`, but on one host (ipc, with rings) an array from the rings' size up is read by the
        receiver from this process's memory (shm_lend.py): done once read; `x` unchanged till then."""
        channels = self.channels
        if channels is None or x.nbytes < self.ring_min_bytes or not x.flags.c_contiguous or not self.lends:
            return self.send(dst, tag, x)
        slot = channels.try_alloc(dst, MARKER_BYTES)
        if slot is None:
            return self.send(dst, tag, x)
        descriptor = slot[1]
        sock = self._push.get(dst) or self._socket_to(dst)
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_LENT, x.dtype, x.shape), zmq.SNDMORE)
        sock.send(shm_lend.payload(descriptor, os.getpid(), x))
        return shm_lend.completion(channels, dst, descriptor, x)

    def reserve(self, dst: int, count: int, dtype: np.dtype) -> Outgoing:
        nbytes = count * dtype.itemsize
        if self.channels is not None and nbytes >= max(self.ring_min_bytes, ZERO_COPY_MIN_BYTES):
            slot = self.channels.try_alloc(dst, nbytes)
            if slot is not None:  # a reduction for `dst` is computed straight into the ring
                view, descriptor = slot
                return Outgoing(dst, view.view(dtype), descriptor)
        return Outgoing(dst, np.empty(count, dtype))

    def send_reserved(self, out: Outgoing, tag: int):
        if out.token is None:
            return self.send(out.dst, tag, out.array)
        sock = self._push.get(out.dst) or self._socket_to(out.dst)
        arr = out.array
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_SHM, arr.dtype, arr.shape), zmq.SNDMORE)
        sock.send(out.token)
        return COMPLETE

    def send_obj(self, dst: int, tag: int, body: bytes):
        sock = self._push.get(dst) or self._socket_to(dst)
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_JSON, _U1, ()), zmq.SNDMORE)
        sock.send(body)
        return COMPLETE

    def receive(self, timeout_ms: int) -> Message | None:
        if self._unread is not None:
            self._unread.fetch()
            self._unread = None
        if timeout_ms != self._timeout_ms:
            self._data.setsockopt(zmq.RCVTIMEO, timeout_ms)
            self._timeout_ms = timeout_ms
        try:
            first = self._data.recv()
        except zmq.Again:
            return None
        more = bool(self._data.get(zmq.RCVMORE))
        try:
            src, tag, kind, dtype, shape = wire.decode_header(first, self._num_ranks)
        except WireError as e:
            extra = self.discard_rest(more)
            raise self.wire_error(
                f"{e} (first bytes {first[:16].hex()}{f', and {extra} more frames' if extra else ''})"
            ) from None
        if kind == wire.KIND_INLINE:
            if more:
                raise self.wire_error(
                    f"from rank {src} tag {tag}: {self.discard_rest(more)} frames after a one-frame message"
                )
            return Message(
                src, tag, KIND_ARRAY, dtype, shape, memoryview(first)[wire.header_size(len(shape)) :]
            )
        # for a descriptor of ring bytes, or of a lent array's marker
        channels = self.channels if kind in (wire.KIND_SHM, wire.KIND_LENT) else None
        if kind not in (wire.KIND_ARRAY_FRAME, wire.KIND_JSON) and channels is None:
            self.discard_rest(more)
            raise self.wire_error(
                f"from rank {src} tag {tag}: kind {kind} is a shared-memory message, not sent over ZeroMQ"
            )
        if not more:
            raise self.wire_error(
                f"from rank {src} tag {tag}: a header without the payload frame that must follow it"
            )
        if kind == wire.KIND_ARRAY_FRAME:
            self._unread = _FrameMessage(self, src, tag, dtype, shape)
            return self._unread
        body = self._data.recv()
        if self._data.get(zmq.RCVMORE):
            raise self.wire_error(
                f"from rank {src} tag {tag}: {self.discard_rest(True)} frames after an object's body"
            )
        if channels is not None and kind == wire.KIND_LENT:
            if len(body) != PAYLOAD_BYTES:
                raise self.wire_error(
                    f"from rank {src} tag {tag}: a lent array's record of {len(body)} bytes"
                )
            return shm_lend.arrived(channels, src, tag, dtype, shape, body)
        if channels is not None:
            if len(body) != DESCRIPTOR_BYTES:
                raise self.wire_error(f"from rank {src} tag {tag}: a ring descriptor of {len(body)} bytes")
            # Registered on arrival: ring space goes back in arrival order, whatever the tag.
            view, end = channels.arrived(src, body)
            return RingMessage(src, tag, KIND_ARRAY, dtype, shape, view, channels, end)
        return Message(src, tag, KIND_OBJ, dtype, shape, body)

    def discard_rest(self, more: bool) -> int:
        """Read and drop what is left of a multi-part message; how many frames that was."""
        n = 0
        while more:
            self._data.recv(copy=False)
            n += 1
            more = bool(self._data.get(zmq.RCVMORE))
        return n

    def wire_error(self, what: str) -> WireError:
        endpoint = cast(bytes, self._data.get(zmq.LAST_ENDPOINT)).decode(errors="replace")
        return WireError(
            f"rank {self.rank}: malformed message on its data socket {endpoint}: {what}", rank=self.rank
        )

    def close(self) -> None:
        for sock in self._push.values():
            sock.close(linger=0)
        self._push.clear()
        self._data.close(linger=0)
        if self.channels is not None:
            self.channels.close()
