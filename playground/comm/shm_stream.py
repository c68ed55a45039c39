"""Large arrays exchanged cell by cell through a small window of shared memory (native/stream.c).

The communicator's `sendrecv_reduce(buf, peer, peer, tag, ufunc)` (a swap with a reduction, what
recursive doubling does at every step) sends `buf` and reduces the peer's copy into it. As two ring
messages that is a copy of the whole buffer into the ring, then, once all of it is there, a pass
reducing it back out: 16 MiB written, then read from beyond the caches. As a *stream* each rank
writes its buffer into a window of a few 64 KiB cells in its ring to the peer and reduces the
peer's cells into its buffer as they come, one cell ahead of the peer, in one C loop with the GIL
released: the bytes a rank reduces were written a few microseconds before, by the other core, and
the window's slots are written again every few cells, so the traffic stays in the caches. That is
how MPICH's shared-memory all-reduce moves its bytes (through small cells the ranks reduce straight
out of); the passes over each rank's own buffer are the same one read and one write.

A stream is announced by a STREAM record in the sender's mailbox (wire.py), so it keeps its place
among the sender's other messages, and the window's space comes from the sender's ring (shm.py),
released in arrival order like any ring message. An exchange:
1. posts its STREAM record and starts writing cells (`exchange`);
2. takes the peer's message for the same tag. A STREAM: both ranks run the loop until both arrays
   are through (`stream`). Any other message from the peer (it sent the usual way: its mailbox was
   full, or it had parked our record before it got to the exchange): this rank finishes sending,
   then hands the message to the communicator to reduce. A message from anyone else: handed to
   the communicator to park, and the exchange stays open.
Each call does one slice (the communicator's SLICE_MS) and says so (None / False); the communicator
checks for aborts and deadlines and calls `land` for the same (peer, tag), which resumes here
(`resume`): the counters in the windows say where the loop was.

A STREAM record taken any other way (a plain receive, or one parked and then reduced) is a
`StreamMessage`: reading it takes the cells as they come (and, if this rank has an exchange open
with that sender, sends its own cells in the same loop). Outside the communicator's slices, that
wait checks between slices that the sender's process lives (its pid is in the window) and gives up
after STALL_S, so a dead sender is an error, not a hang.
"""

import os
import struct
import time

import numpy as np

from playground.comm import wire
from playground.comm.transport import KIND_ARRAY, Message
from playground.core.errors import CommTimeout, PeerLost, UsageError

HEADER_BYTES = 192  # the window's counters and geometry (native/stream.c has the layout)
CELL_BYTES = 64 << 10  # what the loop moves at a time: a cell and its peer's stay in the caches
WINDOW_CELLS = 4  # slots per window: enough for each rank to run a cell ahead of the other
SLICE_MS = 100  # a wait outside the communicator's slices checks the sender's life this often
STALL_S = 60.0  # and gives up after this long
_GEOMETRY = struct.Struct("<iIQQ")  # at +128: pid, slots, cell bytes, array bytes


def geometry(nbytes: int, cell_bytes: int) -> tuple[int, int]:
    """(cell bytes, slots) of the window for an array of `nbytes`: cells of `cell_bytes` (at least
    a cache line; smaller for a small array), and WINDOW_CELLS of them or as many as it has."""
    cell = max(64, min(cell_bytes, -(-nbytes // 64) * 64))
    return cell, max(1, min(WINDOW_CELLS, -(-nbytes // cell)))


def fits(arr: np.ndarray, msg: Message) -> bool:
    """Can the stream's bytes land in `arr` as they are: same dtype and count, C-contiguous, writable?"""
    return arr.dtype == msg.dtype and arr.size == msg.count and arr.flags.c_contiguous and arr.flags.writeable


class _Exchange:
    """An exchange this rank has posted: its window to `peer` and the array it sends and reduces
    into (`buf`); `incoming`: the peer's message for the same tag, once it came."""

    __slots__ = ("peer", "tag", "buf", "window", "code", "incoming")

    def __init__(self, peer: int, tag: int, buf: np.ndarray, window: np.ndarray, code: int):
        self.peer, self.tag, self.buf, self.window, self.code = peer, tag, buf, window, code
        self.incoming: Message | None = None


class StreamMessage(Message):
    """An array coming through its sender's window: its cells are taken as the sender writes them."""

    __slots__ = ("streams", "window", "end", "pid", "owned")

    def __init__(self, src: int, tag: int, dtype, shape, streams: "Streams", window: np.ndarray, end: int):
        super().__init__(src, tag, KIND_ARRAY, dtype, shape, None)
        self.streams, self.end = streams, end
        self.window: np.ndarray | None = window  # None once every cell was taken
        self.owned: np.ndarray | None = None  # the array, once taken into memory of its own
        self.pid = _GEOMETRY.unpack_from(window.data, 128)[0]

    def array(self) -> np.ndarray:
        if self.owned is None:
            owned = self.owned = np.empty(self.shape, self.dtype)
            if self.window is not None:
                self.streams.take(self, owned, 0)
            return owned
        return self.owned

    owned_array = array

    def copy_into(self, out: np.ndarray) -> None:
        if self.owned is None and self.window is not None and fits(out, self):
            self.streams.take(self, out, 0)
        else:
            super().copy_into(out)

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        code = self.streams.code(ufunc, self.dtype)
        plain = base is None or (base.size == self.count and base.flags.c_contiguous)
        if (
            self.owned is None
            and self.window is not None
            and code is not None
            and fits(target, self)
            and plain
        ):
            self.streams.take(self, target, code, base)
        else:
            super().reduce_into(target, ufunc, base)

    def release(self) -> None:
        if self.window is not None:
            self.streams.take(self, None, 0)  # drained: the sender finishes

    def detach(self) -> None:
        self.array()

    def finish(self) -> None:
        """Every cell was taken: hand the window's space back to the sender."""
        if self.window is not None:
            self.window = None
            self.streams.channels.release(self.src, self.end)


class Streams:
    """One rank's streams: the exchanges it has open, by (peer, tag), and the loop that runs them.
    `codes` maps (ufunc, dtype) to native/reduce.c's code (the transport's table); `decode` turns a
    mailbox record into a Message (the transport's)."""

    def __init__(
        self, rank: int, channels, mailboxes, spin: tuple[float, float], cell_bytes: int, codes, decode
    ):
        self.rank, self.channels, self.mailboxes, self.spin = rank, channels, mailboxes, spin
        self.cell_bytes, self.code, self.decode = cell_bytes, codes, decode
        self.open: dict[tuple[int, int], _Exchange] = {}

    def arrived(self, src: int, tag: int, dtype, shape, descriptor) -> StreamMessage:
        window, end = self.channels.window(src, bytes(descriptor))
        return StreamMessage(src, tag, dtype, shape, self, window, end)

    def exchange(self, dst: int, src: int, tag: int, buf: np.ndarray, ufunc, timeout_ms: float):
        """Post `buf` as a stream to `dst` and take `src`'s message into it, as `ShmTransport.exchange`
        says: None (not posted: go the usual way), False (posted, not done within the slice), True
        (done) or a Message from another (sender, tag) for the communicator to park."""
        code = self.code(ufunc, buf.dtype)
        if code is None or dst != src or not (buf.flags.c_contiguous and buf.flags.writeable):
            return None
        if (src, tag) in self.open:
            raise UsageError(
                f"rank {self.rank}: a second exchange with rank {src} tag {tag} before the first ended"
            )
        cell, slots = geometry(buf.nbytes, self.cell_bytes)
        slot = self.channels.try_alloc(dst, HEADER_BYTES + slots * cell)
        if slot is None:
            return None
        window, descriptor = slot
        window[:HEADER_BYTES] = 0
        _GEOMETRY.pack_into(window, 128, os.getpid(), slots, cell, buf.nbytes)
        head = wire.encode_header(self.rank, tag, wire.KIND_STREAM, buf.dtype, buf.shape)
        if not self.mailboxes.try_send(dst, head + descriptor):
            self.channels.undo_alloc(dst)
            return None
        ex = self.open[(src, tag)] = _Exchange(dst, tag, buf, window, code)
        got = self._advance(ex, timeout_ms)
        return False if got is None else got

    def resume(self, src: int, tag: int, target: np.ndarray, timeout_ms: float):
        """`land` for an open exchange: None (the slice ended), True (done) or a Message."""
        ex = self.open[(src, tag)]
        if (
            target is not ex.buf
            and target.__array_interface__["data"][0] != ex.buf.__array_interface__["data"][0]
        ):
            raise UsageError(
                f"rank {self.rank}: the exchange with rank {src} tag {tag} lands in another array"
            )
        return self._advance(ex, timeout_ms)

    def _advance(self, ex: _Exchange, timeout_ms: float):
        """One slice of an open exchange: True once done, None when the slice ended first, or a
        Message from another (sender, tag) that came meanwhile (the exchange stays open)."""
        deadline = time.monotonic() + timeout_ms / 1e3
        stream, peer = self.mailboxes.stream, ex.peer
        while ex.incoming is None:  # send while the peer's message is on its way (or it is not exchanging)
            sent = stream(peer, ex.window, ex.buf, None, None, 0, None, _left_ms(deadline), *self.spin, True)
            if sent is False:
                return None
            record = self.mailboxes.receive(_left_ms(deadline) if sent else 0, *self.spin)
            if record is None:
                return None
            msg = self.decode(record)
            if msg.src != peer or msg.tag != ex.tag:
                return msg
            ex.incoming = msg
        inc = ex.incoming
        if type(inc) is StreamMessage and inc.window is not None:
            target = (
                ex.buf if fits(ex.buf, inc) else None
            )  # another size or type: drained, and the caller told
            if not stream(
                peer, ex.window, ex.buf, inc.window, target, ex.code, None, _left_ms(deadline), *self.spin
            ):
                return None
            inc.finish()
            del self.open[(peer, ex.tag)]
            return True if target is not None else inc
        # the peer sent the usual way: finish sending, then the communicator reduces its message
        if not stream(peer, ex.window, ex.buf, None, None, 0, None, _left_ms(deadline), *self.spin):
            return None
        del self.open[(peer, ex.tag)]
        return inc

    def take(
        self, msg: StreamMessage, target: np.ndarray | None, code: int, base: np.ndarray | None = None
    ) -> None:
        """Take all of `msg`'s cells into `target` (None: drained), with this rank's own cells going
        out in the same loop if it has an exchange open with the sender on that tag (the peer may be
        waiting for them), waiting in slices and checking between them that the sender lives."""
        ex = self.open.get((msg.src, msg.tag))
        if ex is not None and ex.incoming is not None and ex.incoming is not msg:
            ex = None  # that exchange took another message: not this one's
        out = (ex.window, ex.buf) if ex is not None else (None, None)
        t0 = time.monotonic()
        while not self.mailboxes.stream(msg.src, *out, msg.window, target, code, base, SLICE_MS, *self.spin):
            if not _alive(msg.pid):
                reason = f"rank {msg.src} (pid {msg.pid}) exited while streaming to this rank"
                raise PeerLost(self.rank, reason, peer=msg.src, tag=msg.tag, op="recv")
            if time.monotonic() - t0 > STALL_S:
                what = f"the rest of a stream from rank {msg.src} tag {msg.tag}"
                raise CommTimeout(self.rank, "recv", msg.src, msg.tag, STALL_S, what=what)
        if ex is not None:
            del self.open[(msg.src, msg.tag)]
        msg.finish()


def _left_ms(deadline: float) -> float:
    return max(0.0, (deadline - time.monotonic()) * 1e3)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
