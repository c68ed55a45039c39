"""Messages on one host without ZeroMQ: a mailbox per (sender, receiver), bytes in /dev/shm rings.

As NCCL's SHM transport does within a node. Every message is one record in the sender's mailbox
at the receiver (mailbox.py: shared-memory slots, a bell the receiver spins or sleeps on, no
system call while it is awake). Small arrays and JSON bodies travel inside the record; arrays from
`min_bytes` up (or too large for a slot) are written into the sender's ring to the receiver
(shm.py) and the record carries their descriptor. One channel per pair keeps per-sender order.

A small array can also be taken without a Python object in between (`land`, `exchange`):
the C receive compares the record with the header the caller expects and reduces (or copies) the
payload straight from the mailbox slot into the caller's array (native/reduce.c: sum, prod, max,
min of float32/64 and int32/64, equal to numpy bit for bit); anything else comes back as `receive`
returns it. That is most of the gain on an 8-byte all-reduce (docs/shm-transport.md).

An array the sender promises to keep unchanged until its send completes (`lend`: an all-to-all's
input) is not copied at all from `min_bytes` up: the receiver reads it from the sender's memory
(shm_lend.py), one copy where a ring message makes two.

A ring message is released in arrival order, whatever order the program receives in (shm.py);
a parked one can `detach`, copying its bytes out so the sender gets the space back. A post finds
NoRoom when the mailbox or the ring is full; then nothing was sent (a ring slot whose descriptor
did not fit the mailbox is taken back), and the communicator waits while taking in what arrives.
"""

import os
from typing import Literal

import numpy as np

from playground.comm import shm_lend, wire
from playground.comm.mailbox import Mailboxes, Swap, copy_payload, slot_bytes_for
from playground.comm.shm import SHM_MIN_BYTES, ShmChannels
from playground.comm.shm_lend import MARKER_BYTES, LentMessage, peer_reads_allowed
from playground.comm.shm_stream import CELL_BYTES, Streams
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, NoRoom, Outgoing

SEGMENT_BYTES = (
    4 << 20
)  # a ring message costs a descriptor, not a trip through the kernel: +13-16% busbw vs 1 MiB
SLOT_HEADER_BYTES = 16  # native/mailbox.h: the part of a mailbox slot before its record
MAILBOX_FULL = NoRoom("its mailbox")
RING_FULL = NoRoom("the shared-memory ring to it")
_U1 = np.dtype("u1")
_MEMO_MAX = 4096  # distinct headers remembered per direction; forgotten all at once beyond
# What `land` computes natively (native/reduce.c's codes: op * 8 + dtype); a copy (ufunc None) is
# any dtype's bytes. Other ufuncs and dtypes are received and reduced as usual.
_LAND_OPS = {None: 0, np.add: 1, np.multiply: 2, np.maximum: 3, np.minimum: 4}
_LAND_DTYPES = {np.dtype(t): code for code, t in enumerate((np.float32, np.float64, np.int32, np.int64))}


def streams_from_bytes(size: int = 2) -> int:
    """The smallest 1-D array whose swap (`exchange`) streams through a window (shm_stream.py) rather
    than travelling inline in a mailbox slot, in a run of `size` ranks: from SHM_MIN_BYTES, or what a
    slot's record cannot hold (slots shrink past 15 ranks: mailbox.slot_bytes_for)."""
    return min(SHM_MIN_BYTES, slot_bytes_for(size) - SLOT_HEADER_BYTES - wire.header_size(1) + 1)


def _code(ufunc, dtype: np.dtype) -> int | None:
    """native/reduce.c's code for `ufunc` on `dtype` (a copy: 0, any dtype), None if C has none."""
    op = _LAND_OPS.get(ufunc)
    if op is None or op == 0:
        return op
    code = _LAND_DTYPES.get(dtype)
    return None if code is None else op * 8 + code


class _InlineMessage(Message):
    """A small array inside its mailbox record (bytes this process owns), `offset` bytes in.

    `scratch` is an array of the message's dtype and count, one per distinct header, to reduce
    from: filling it is one memcpy, where a numpy view of the record costs more than the reduction.
    """

    __slots__ = ("offset", "scratch")

    def __init__(self, src, tag, dtype, shape, record: bytes, offset: int, scratch: np.ndarray):
        self.src, self.tag, self.kind, self.dtype, self.shape = src, tag, KIND_ARRAY, dtype, shape
        self.payload, self.offset, self.scratch = record, offset, scratch

    def array(self) -> np.ndarray:
        arr = np.frombuffer(self.payload, dtype=self.dtype, offset=self.offset)
        return arr if len(self.shape) == 1 else arr.reshape(self.shape)

    def copy_into(self, out: np.ndarray) -> None:
        if out.dtype is self.dtype or out.dtype == self.dtype:
            try:
                copy_payload(out, self.payload, self.offset)  # one memcpy, no view in between
                return
            except ValueError:
                pass  # not contiguous, or another size: the general path copes or says why
        super().copy_into(out)

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        arr = self.scratch
        copy_payload(arr, self.payload, self.offset)
        if arr.shape != target.shape:
            arr = arr.reshape(target.shape)
        ufunc(target if base is None else base, arr, out=target)


class RingMessage(Message):
    """An array (or JSON body) that is still in the sender's ring; `release` hands the space back."""

    __slots__ = ("channels", "end")
    channels: ShmChannels | None  # None once released

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
    """One rank's rings (`channels`) and mailboxes; arrays below `min_bytes` go inline.

    `spin` is how long the receiver polls before it sleeps: (pause_ns, yield_ns), mailbox.spin_policy."""

    name = "shm"
    segment_bytes = SEGMENT_BYTES

    def __init__(
        self,
        rank: int,
        channels: ShmChannels,
        mailboxes: Mailboxes,
        min_bytes: int,
        spin: tuple[float, float] = (0.0, 0.0),
        cell_bytes: int = CELL_BYTES,
    ):
        self.rank = rank
        self.channels, self.mailboxes, self.min_bytes = channels, mailboxes, min_bytes
        self.max_record = mailboxes.max_bytes
        self.pid = os.getpid()
        self.lends = peer_reads_allowed()  # else `lend` is `send`
        self.pause_ns, self.yield_ns = spin
        self.lend_spin_s = spin[0] / 1e9  # a lent send's wait pauses this long, as the receiver does
        # exchanges of arrays that do not travel inline stream through a window (shm_stream.py)
        self.streams = Streams(rank, channels, mailboxes, spin, cell_bytes, _code, self._message)
        self._open = self.streams.open

        # Small messages repeat their header (same tag, dtype, shape) call after call: remember
        # each one encoded or decoded, which halves the Python work of an 8-byte message.
        self._inline_max = [self.max_record - wire.header_size(n) for n in range(33)]
        self._heads_out: dict[tuple, bytes] = {}
        self._heads_in: dict[bytes, tuple] = {}
        self._lent_heads: dict[tuple, bytes] = {}
        self._landings: dict[tuple, tuple[bytes, int] | None] = {}
        self._exchanges: dict[tuple, tuple[bytes, bytes, int] | None] = {}
        self.exchange = Swap(mailboxes, self._exchanges, self._exchange, self._message, *spin)

    def _inline_fits(self, nbytes: int, ndim: int) -> bool:
        return nbytes < self.min_bytes and nbytes <= self._inline_max[ndim]

    def send(self, dst: int, tag: int, x: np.ndarray):
        nbytes = x.nbytes
        if nbytes < self.min_bytes and nbytes <= self._inline_max[x.ndim]:
            key = (tag, x.dtype, x.shape)
            head = self._heads_out.get(key)
            if head is None:
                if len(self._heads_out) >= _MEMO_MAX:
                    self._heads_out.clear()
                head = self._heads_out[key] = wire.encode_header(
                    self.rank, tag, wire.KIND_INLINE, x.dtype, x.shape
                )
            try:
                sent = self.mailboxes.try_send(dst, head, x)
            except ValueError:  # not C-contiguous (the size was checked above)
                sent = self.mailboxes.try_send(dst, head, np.ascontiguousarray(x))
            return COMPLETE if sent else MAILBOX_FULL
        slot = self.channels.try_alloc(dst, nbytes)
        if slot is None:
            return RING_FULL
        view, descriptor = slot
        np.copyto(view.view(x.dtype).reshape(x.shape), x)  # any layout
        record = wire.encode_header(self.rank, tag, wire.KIND_SHM, x.dtype, x.shape) + descriptor
        if self.mailboxes.try_send(dst, record):
            return COMPLETE
        self.channels.undo_alloc(dst)
        return MAILBOX_FULL

    def lend(self, dst: int, tag: int, x: np.ndarray):
        """`send`, but from `min_bytes` up a C-contiguous `x` is read by the receiver where it lies
        (shm_lend.py): the completion is done once it has been read, and `x` must not change before."""
        if not self.lends or x.nbytes < self.min_bytes or not x.flags.c_contiguous:
            return self.send(dst, tag, x)
        slot = self.channels.try_alloc(dst, MARKER_BYTES)
        if slot is None:
            return RING_FULL
        descriptor = slot[1]
        key = (tag, x.dtype, x.shape)
        head = self._lent_heads.get(key)
        if head is None:
            if len(self._lent_heads) >= _MEMO_MAX:
                self._lent_heads.clear()
            head = self._lent_heads[key] = wire.encode_header(
                self.rank, tag, wire.KIND_LENT, x.dtype, x.shape
            )
        if self.mailboxes.try_send(dst, head + shm_lend.payload(descriptor, self.pid, x)):
            return shm_lend.completion(self.channels, dst, descriptor, x, self.lend_spin_s)
        self.channels.undo_alloc(dst)
        return MAILBOX_FULL

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
        return COMPLETE if self.mailboxes.try_send(out.dst, record) else MAILBOX_FULL

    def send_obj(self, dst: int, tag: int, body: bytes):
        header = wire.encode_header(self.rank, tag, wire.KIND_JSON, _U1, ())
        if len(header) + len(body) <= self.max_record:
            return COMPLETE if self.mailboxes.try_send(dst, header, body) else MAILBOX_FULL
        slot = self.channels.try_alloc(dst, len(body))
        if slot is None:
            return RING_FULL
        view, descriptor = slot
        view[:] = np.frombuffer(body, dtype=np.uint8)
        if self.mailboxes.try_send(
            dst, wire.encode_header(self.rank, tag, wire.KIND_JSON_SHM, _U1, ()) + descriptor
        ):
            return COMPLETE
        self.channels.undo_alloc(dst)
        return MAILBOX_FULL

    def receive(self, timeout_ms: int) -> Message | None:
        record = self.mailboxes.receive(timeout_ms, self.pause_ns, self.yield_ns)
        return None if record is None else self._message(record)

    def land(self, src: int, tag: int, target: np.ndarray, ufunc, base: np.ndarray | None, timeout_ms: int):
        """`receive`, but if the next message is the small array from (src, tag) that fits `target`,
        put it there in C, straight from its mailbox slot: target = ufunc(base or target, message),
        or a copy when ufunc is None; then True. Any other message is returned as `receive` does.
        For an exchange this rank has open with `src` (a stream), one more slice of it."""
        if self._open and (src, tag) in self._open:
            return self.streams.resume(src, tag, target, timeout_ms)
        key = (src, tag, ufunc, target.dtype, target.shape)
        landing: tuple[bytes, int] | None | Literal[False] = self._landings.get(key, False)  # False: not seen
        if landing is False:
            landing = self._landing(*key)
        if landing is not None:
            try:
                got = self.mailboxes.land(
                    timeout_ms, self.pause_ns, self.yield_ns, src, landing[0], target, landing[1], base
                )
            except (ValueError, BufferError):  # not a writable C-contiguous target: the usual way
                got = self.mailboxes.receive(timeout_ms, self.pause_ns, self.yield_ns)
        else:
            got = self.mailboxes.receive(timeout_ms, self.pause_ns, self.yield_ns)
        if got is None or got is True:
            return got
        msg = self._message(got)
        if (
            type(msg) is LentMessage
            and ufunc is None
            and msg.src == src
            and msg.tag == tag
            and msg.fits(target)
        ):
            msg.read_into(target)  # a lent array: read from the sender's memory into `target`, here
            return True
        return msg

    def _exchange(self, dst: int, src: int, tag: int, buf: np.ndarray, ufunc, timeout_ms: int):
        """`exchange` (a native Swap over this method, swap.c: these first lines, once the memo has
        the plan): post `buf` to `dst`, then land the array from (src, tag) in `buf` as `land` does,
        in one C call: a small exchange step; a larger `buf` streams (shm_stream.py). None: nothing
        was posted (no room, or an exchange C cannot compute): post it the usual way. Otherwise False
        (not done within the wait: `land` goes on), True (landed) or the Message that came first."""
        key = (dst, src, tag, ufunc, buf.dtype, buf.shape)
        plan: tuple[bytes, bytes, int] | None | Literal[False] = self._exchanges.get(key, False)
        if plan is False:
            landing = self._landing(src, tag, ufunc, buf.dtype, buf.shape)
            plan = landing and (
                wire.encode_header(self.rank, tag, wire.KIND_INLINE, buf.dtype, buf.shape),
                *landing,
            )
            if len(self._exchanges) >= _MEMO_MAX:
                self._exchanges.clear()
            self._exchanges[key] = plan
        if plan is None:
            if self._inline_fits(buf.nbytes, buf.ndim):
                return None
            return self.streams.exchange(dst, src, tag, buf, ufunc, timeout_ms)
        try:
            got = self.mailboxes.exchange(
                dst, plan[0], buf, timeout_ms, self.pause_ns, self.yield_ns, src, plan[1], buf, plan[2]
            )
        except (ValueError, BufferError):  # not a writable C-contiguous buffer: the usual way
            return None
        return got if got is None or type(got) is bool else self._message(got)

    def _landing(self, src: int, tag: int, ufunc, dtype: np.dtype, shape: tuple) -> tuple[bytes, int] | None:
        """(the header the sender's record starts with, native/reduce.c's code), or None when such an
        array does not travel inline or C does not compute this ufunc on this dtype."""
        code, landing = _code(ufunc, dtype), None
        if code is not None and self._inline_fits(dtype.itemsize * int(np.prod(shape)), len(shape)):
            landing = (wire.encode_header(src, tag, wire.KIND_INLINE, dtype, shape), code)
        if len(self._landings) >= _MEMO_MAX:
            self._landings.clear()
        self._landings[(src, tag, ufunc, dtype, shape)] = landing
        return landing

    def _message(self, record: bytes) -> Message:
        """The Message a mailbox record holds."""
        size = wire.record_header_size(record) if len(record) > 8 else 0
        head = self._heads_in.get(record[:size])
        if head is not None:
            if head[5] is None:  # a lent array, header seen before
                return shm_lend.arrived(
                    self.channels, head[0], head[1], head[2], head[3], memoryview(record)[size:]
                )
            if len(record) == head[4]:  # an inline array seen before
                return _InlineMessage(head[0], head[1], head[2], head[3], record, size, head[5])
        src, tag, kind, dtype, shape, payload = wire.decode_record(record)
        if kind == wire.KIND_LENT:
            if len(self._heads_in) >= _MEMO_MAX:
                self._heads_in.clear()
            self._heads_in[record[:size]] = (src, tag, dtype, shape, 0, None)
            return shm_lend.arrived(self.channels, src, tag, dtype, shape, payload)
        if kind == wire.KIND_INLINE:
            if len(self._heads_in) >= _MEMO_MAX:
                self._heads_in.clear()
            scratch = np.empty(shape, dtype)
            self._heads_in[record[:size]] = (src, tag, dtype, shape, len(record), scratch)
            return _InlineMessage(src, tag, dtype, shape, record, size, scratch)
        if kind == wire.KIND_JSON:
            return Message(src, tag, KIND_OBJ, dtype, shape, payload)
        if kind == wire.KIND_STREAM:
            return self.streams.arrived(src, tag, dtype, shape, payload)
        # Registered on arrival: ring space is handed back in arrival order, whatever the tag.
        view, end = self.channels.arrived(src, payload)
        message_kind = KIND_ARRAY if kind == wire.KIND_SHM else KIND_OBJ
        return RingMessage(src, tag, message_kind, dtype, shape, view, self.channels, end)

    def close(self) -> None:
        self.channels.close()
        self.mailboxes.close()
