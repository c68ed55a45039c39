"""Rings for large arrays on one host: the bytes go through /dev/shm, a message carries a descriptor.

As NCCL's SHM transport does within a node: for each (sender, receiver) pair the sender owns a
ring buffer, a file in /dev/shm mapped by both processes. To send, the sender writes the array
into free space of its ring and sends a small descriptor (position, bytes, sequence end) in a
message that keeps per-sender order: through its mailbox at the receiver on the shm path
(mailbox.py), through ZeroMQ on the ipc path (zmq_transport.py). The receiver registers each
descriptor as it arrives, reduces or copies straight out of the mapping (no trip through the
kernel's socket buffers) and then *releases* the message; space goes back to the sender in
arrival order by advancing the `consumed` counter in the ring's header, which only the receiver
writes and the sender reads (an aligned 8-byte store: atomic on the machines we run on).

`try_alloc` never waits: when the ring has no room it says so, and the communicator waits, taking
in (and copying out) what arrives meanwhile. Positions restart at 0 whenever the ring is empty, so
only the peak in-flight bytes are ever touched (the files are sparse). Why not
multiprocessing.shared_memory: in Python 3.11 every process that attaches registers the segment
with its resource tracker, which unlinks it when that process exits, under the others' feet.
"""

import mmap
import os
import shutil
import struct
from collections import deque

import numpy as np

from playground.comm.addresses import shm_dir_for

HEADER_BYTES = 64
ALIGN = 64
DEFAULT_CAPACITY_BYTES = 1 << 30  # virtual size of each ring; pages are touched only as used
# arrays up to 64 KiB travel inline in their mailbox record (mailbox.SLOT_BYTES), larger ones not
SHM_MIN_BYTES = (64 << 10) + 1
_DESC = struct.Struct("<QQQ")  # position, nbytes, end (sender's running total when this message ends)
DESCRIPTOR_BYTES = _DESC.size
_END = struct.Struct("<Q")  # a descriptor's third field, read alone


def remove_shm_dir(master_port: int, generation: int = 0) -> None:
    shutil.rmtree(shm_dir_for(master_port, generation), ignore_errors=True)


def _map(path: str, size: int, create: bool) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0), 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size if create else os.fstat(fd).st_size)
    finally:
        os.close(fd)


class _OutRing:
    """The sender's side of one ring: where the next message fits, and what is still unread."""

    def __init__(self, path: str, capacity: int):
        self.map = _map(path, capacity, create=True)
        self.consumed = np.frombuffer(self.map, dtype=np.uint64, count=1, offset=0)
        self.data = np.frombuffer(self.map, dtype=np.uint8, offset=HEADER_BYTES)
        self.cap = self.data.size
        self.written = 0  # running total of bytes handed out (including alignment)
        self.head = 0
        self.outstanding: deque[tuple[int, int]] = deque()  # (end, position) in send order
        self._undo = (0, 0)  # (head, written) before the last allocation

    def allocate(self, nbytes: int) -> tuple[int, int] | None:
        """(position, end) for a message of `nbytes`, or None if it does not fit right now."""
        consumed = int(self.consumed[0])
        while self.outstanding and self.outstanding[0][0] <= consumed:
            self.outstanding.popleft()
        size = (nbytes + ALIGN - 1) // ALIGN * ALIGN
        if not self.outstanding:
            self.head = 0
            pos = 0 if size <= self.cap else None
        else:
            oldest = self.outstanding[0][1]
            if self.head > oldest:  # unread data is [oldest, head): room after it, or before it after a wrap
                pos = self.head if self.head + size <= self.cap else (0 if size <= oldest else None)
            elif self.head < oldest:  # wrapped: room between head and the oldest unread message
                pos = self.head if self.head + size <= oldest else None
            else:  # head caught up with the oldest unread message: full
                pos = None
        if pos is None:
            return None
        self._undo = (self.head, self.written)
        self.head = pos + size
        self.written += size
        self.outstanding.append((self.written, pos))
        return pos, self.written

    def undo(self) -> None:
        """Take back the last allocation, which was never announced to the receiver."""
        self.outstanding.pop()
        self.head, self.written = self._undo


class _InRing:
    """The receiver's side: views into the sender's ring, released in order."""

    def __init__(self, path: str):
        self.map = _map(path, 0, create=False)
        self.consumed = np.frombuffer(self.map, dtype=np.uint64, count=1, offset=0)
        self.data = np.frombuffer(self.map, dtype=np.uint8, offset=HEADER_BYTES)
        self.arrived: deque[int] = deque()  # ends, in arrival (= send) order
        self.released: set[int] = set()

    def release(self, end: int) -> None:
        self.released.add(end)
        while self.arrived and self.arrived[0] in self.released:
            done = self.arrived.popleft()
            self.released.discard(done)
            self.consumed[0] = done


class ShmChannels:
    """All rings of one rank: outgoing ones it owns, incoming ones it maps on first use."""

    def __init__(self, rank: int, directory: str, capacity_bytes: int = DEFAULT_CAPACITY_BYTES):
        self.rank, self.dir, self.capacity = rank, directory, capacity_bytes
        os.makedirs(directory, exist_ok=True)
        self._out: dict[int, _OutRing] = {}
        self._in: dict[int, _InRing] = {}

    def try_alloc(self, dst: int, nbytes: int) -> tuple[np.ndarray, bytes] | None:
        """(writable byte view, descriptor) of fresh space in the ring to `dst`; None if there is no
        room. Send the descriptor before allocating again for `dst`: the receiver releases space
        in the order descriptors arrive."""
        ring = self._out.get(dst)
        if ring is None:
            ring = self._out[dst] = _OutRing(os.path.join(self.dir, f"{self.rank}-{dst}"), self.capacity)
        slot = ring.allocate(nbytes)
        if slot is None:
            return None
        pos, end = slot
        return ring.data[pos : pos + nbytes], _DESC.pack(pos, nbytes, end)

    def consumed(self, dst: int) -> np.ndarray:
        """The ring to `dst`'s `consumed` counter (one uint64, written by the receiver): a descriptor's
        `end` at or below it has been released."""
        return self._out[dst].consumed

    def undo_alloc(self, dst: int) -> None:
        """Return the space of the last `try_alloc` for `dst` (its descriptor could not be sent)."""
        self._out[dst].undo()

    def arrived(self, src: int, descriptor: bytes | memoryview) -> tuple[np.ndarray, int]:
        """(read-only byte view, end) of a message as it arrives; `release(src, end)` when done."""
        ring = self._in.get(src)
        if ring is None:
            ring = self._in[src] = _InRing(os.path.join(self.dir, f"{src}-{self.rank}"))
        pos, nbytes, end = _DESC.unpack(descriptor)
        ring.arrived.append(end)
        view = ring.data[pos : pos + nbytes]
        view.flags.writeable = False
        return view, end

    def arrived_marker(self, src: int, descriptor: bytes | memoryview) -> int:
        """`arrived` for a message whose ring space nobody reads (a lent array's marker): its end."""
        ring = self._in.get(src)
        if ring is None:
            ring = self._in[src] = _InRing(os.path.join(self.dir, f"{src}-{self.rank}"))
        end = _END.unpack_from(descriptor, 16)[0]
        ring.arrived.append(end)
        return end

    def window(self, src: int, descriptor: bytes) -> tuple[np.ndarray, int]:
        """(writable byte view, end) of a stream's window as its announcement arrives: as `arrived`,
        but the receiver writes the window's `consumed` counter (shm_stream.py)."""
        view, end = self.arrived(src, descriptor)
        ring = self._in[src]
        pos = _DESC.unpack(descriptor)[0]
        return ring.data[pos : pos + view.size], end

    def release(self, src: int, end: int) -> None:
        self._in[src].release(end)

    def close(self) -> None:
        for ring in list(self._out.values()) + list(self._in.values()):
            del ring.consumed, ring.data  # our views of the mapping: without them it can close
            try:
                ring.map.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes with the process
        for dst in self._out:
            try:
                os.unlink(os.path.join(self.dir, f"{self.rank}-{dst}"))
            except OSError:
                pass
        self._out.clear()
        self._in.clear()
