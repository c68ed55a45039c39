"""Lent arrays: the receiver copies a large array straight out of the sender's memory (one copy).

A ring message (shm.py) crosses between the processes twice: the sender copies the array into its
ring, the receiver copies it out. For an array the sender keeps unchanged until the send completes
(an all-to-all's input, a gather's or scatter's blocks), MPICH's shared-memory path does it once:
the receiver reads the sender's pages where they lie (Linux cross-memory attach, process_vm_readv;
UCX's cma transport, MPICH's LMT). Here a *lent* send posts a LENT record (wire.py) with the
array's address and the sender's pid, and a marker of one cache line in the sender's ring to the
receiver: its ring space is released in arrival order like any ring message's, so when the ring's
`consumed` counter passes the marker the receiver has read the array, and the send is complete
(`Lent`, the sender's completion). The receiver reads with `read_peer` (native/cma.c) into its
target, or into an array of its own for a message it parks (`detach`), then releases the marker.

Where the kernel refuses such reads (another user, Yama's ptrace scope, a seccomp filter), the probe
at start says so and a lent send is an ordinary one. A sender that dies before the read makes it
fail (ESRCH): PeerLost naming the sender. A receiver that dies leaves the sender's completion
undone; its wait checks the launcher's abort between slices, as every wait does.
"""

import os
import struct
import time

import numpy as np
from _playground_native import address_of, probe_peer_reads, read_peer

from playground.comm.shm import DESCRIPTOR_BYTES
from playground.comm.transport import KIND_ARRAY, Message
from playground.core.errors import PeerLost

MARKER_BYTES = 64  # a lent message's ring space: one cache line, whose release says "read"
WHERE = struct.Struct("<qQ")  # the sender's pid, the array's address
PAYLOAD_BYTES = DESCRIPTOR_BYTES + WHERE.size
_END = struct.Struct("<Q")  # a ring descriptor's third field (shm.py): where its space ends
SPIN_S = 200e-6  # a completion polls this long while ranks have cores (as mailbox.py's receiver)
YIELD_S = 2e-3  # then polls yielding the core this long (the reader may need it), then naps
NAP_S = 20e-6  # (a sleep this short takes ~60-80 us: only once the reader is evidently slow)

_can_read: bool | None = None


def peer_reads_allowed() -> bool:
    """May this rank read its peers' memory (asked of the kernel once a process)?"""
    global _can_read
    if _can_read is None:
        _can_read = bool(probe_peer_reads())
    return _can_read


def payload(descriptor: bytes, pid: int, x: np.ndarray) -> bytes:
    """A LENT record's payload: the marker's ring descriptor, then whose memory and where in it."""
    return descriptor + WHERE.pack(pid, address_of(x))


def completion(channels, dst: int, descriptor: bytes, x: np.ndarray, spin_s: float = SPIN_S) -> "Lent":
    """The sender's completion of the lent `x` whose marker `descriptor` (shm.py) names."""
    return Lent(channels.consumed(dst), _END.unpack_from(descriptor, 16)[0], x, spin_s)


def arrived(channels, src: int, tag: int, dtype, shape, body) -> "LentMessage":
    """The message of a LENT record's `body` (`payload`), its marker registered on arrival as every
    ring message is (space goes back in arrival order)."""
    end = channels.arrived_marker(src, body)
    pid, address = WHERE.unpack_from(body, DESCRIPTOR_BYTES)
    return LentMessage(src, tag, dtype, shape, channels, end, pid, address)


class Lent:
    """The sender's completion of a lent send: done once the receiver released the marker (the ring's
    `consumed` counter passed `end`). `x` is held so that the array outlives the read. `spin_s`: how
    long a wait polls before it yields the core between polls (0 where ranks outnumber cores:
    mailbox.spin_policy)."""

    __slots__ = ("consumed", "end", "x", "spin_s")

    def __init__(self, consumed: np.ndarray, end: int, x: np.ndarray, spin_s: float = SPIN_S):
        self.consumed, self.end, self.spin_s = consumed, end, spin_s
        self.x: np.ndarray | None = x

    @property
    def done(self) -> bool:
        return int(self.consumed[0]) >= self.end

    def wait(self, timeout_s: float) -> bool:
        consumed, end = self.consumed, self.end
        start = time.monotonic()
        deadline = start + timeout_s
        while int(consumed[0]) < end:
            now = time.monotonic()
            if now >= deadline:
                return False
            waited = now - start
            if waited < self.spin_s:
                continue
            if waited < YIELD_S:
                os.sched_yield()
            else:
                time.sleep(NAP_S)
        self.x = None
        return True


class LentMessage(Message):
    """An array still in its sender's memory; `release` (once read) lets the sender's send complete."""

    __slots__ = ("channels", "end", "pid", "address", "owned")

    def __init__(self, src, tag, dtype, shape, channels, end: int, pid: int, address: int):
        super().__init__(src, tag, KIND_ARRAY, dtype, shape, None)
        self.channels, self.end, self.pid, self.address = channels, end, pid, address
        self.owned: np.ndarray | None = None

    def fits(self, out: np.ndarray) -> bool:
        """Can the array be read straight into `out` (same dtype and count, C-contiguous, writable)?"""
        return (
            self.owned is None
            and out.dtype == self.dtype
            and out.size == self.count
            and out.flags.c_contiguous
            and out.flags.writeable
        )

    def read_into(self, out: np.ndarray) -> None:
        """Read the array into `out` (which `fits`), then release it."""
        self._read(out)

    def _read(self, out: np.ndarray) -> None:
        try:
            read_peer(self.pid, self.address, out)
        except OSError as e:
            raise PeerLost(
                self.src,
                f"rank {self.src} (pid {self.pid}) lent an array this rank could not read: {e.strerror}",
                peer=self.src,
                tag=self.tag,
                op="recv",
            ) from None
        self.release()

    def array(self) -> np.ndarray:
        if self.owned is None:
            self.owned = np.empty(self.shape, self.dtype)
            self._read(self.owned)
        return self.owned

    owned_array = array

    def copy_into(self, out: np.ndarray) -> None:
        if self.fits(out):
            self._read(out)
        else:
            super().copy_into(out)

    def release(self) -> None:
        if self.channels is not None:
            self.channels.release(self.src, self.end)
            self.channels = None

    def detach(self) -> None:
        self.array()
