"""Per-rank inboxes on one host: a named pipe each, so a message wakes its receiver directly.

On the shared-memory path the bytes of large arrays are in /dev/shm rings (shm.py); what remains
is to tell the receiver, and for small arrays to carry the bytes. Through ZeroMQ that costs three
thread wake-ups per message (sender's I/O thread, receiver's I/O thread, receiving thread): about
120 us for a 64-byte round trip on the 2-core machine we develop on. A named pipe per rank costs
one (the receiver's): about 55 us, and 5 us when the receiver polls briefly before it sleeps
(`spin_budget_s`: only while ranks do not outnumber cores by much).

Every record is one `write` of at most PIPE_BUF (4096) bytes, which POSIX makes atomic, so all
peers share a rank's one pipe without interleaving: [u32 length][record]. A writer never blocks
(O_NONBLOCK): if the pipe is full, `try_send` says so and the caller waits while draining its own
inbox, so two ranks that flood each other cannot deadlock. Linux only (O_RDWR on a FIFO, which keeps
the read end from ever seeing end-of-file, and F_SETPIPE_SZ).
"""

import errno
import fcntl
import os
import select
import struct
import time
from collections import deque

from playground.errors import PeerLost

PIPE_BUF = select.PIPE_BUF
MAX_RECORD = PIPE_BUF - 4
PIPE_BYTES = 1 << 20  # the default ceiling (/proc/sys/fs/pipe-max-size) for unprivileged users
_LEN = struct.Struct("<I")


def inbox_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"inbox-{rank}")


class Inboxes:
    """This rank's inbox (read end) and its peers' (write ends, opened on first send)."""

    def __init__(self, rank: int, directory: str, spin_s: float = 0.0):
        self.rank, self.dir, self.spin_s = rank, directory, spin_s
        os.makedirs(directory, exist_ok=True)
        path = inbox_path(directory, rank)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.mkfifo(path, 0o600)
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        _grow(self._fd)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._out: dict[int, int] = {}
        self._buf = b""
        self._records: deque[bytes] = deque()

    # -- sending ---------------------------------------------------------------------------
    def _peer_fd(self, dst: int) -> int | None:
        fd = self._out.get(dst)
        if fd is None:
            try:
                fd = os.open(inbox_path(self.dir, dst), os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:  # not created yet (ENOENT) or not opened for reading yet (ENXIO)
                if exc.errno in (errno.ENOENT, errno.ENXIO):
                    return None
                raise
            self._out[dst] = fd
        return fd

    def try_send(self, dst: int, record: bytes) -> bool:
        """Put one record (at most MAX_RECORD bytes) in `dst`'s inbox; False if it has no room now."""
        fd = self._out.get(dst) or self._peer_fd(dst)
        if fd is None:
            return False
        try:
            os.write(fd, _LEN.pack(len(record)) + record)
            return True
        except BlockingIOError:
            return False
        except BrokenPipeError:  # no reader any more: the peer's process is gone
            raise PeerLost(
                self.rank, f"rank {dst} closed its inbox (it exited or died)", peer=dst, direction="to"
            ) from None

    # -- receiving -------------------------------------------------------------------------
    def next_record(self, timeout_ms: int) -> bytes | None:
        """The next record, waiting up to `timeout_ms` (0: only what has arrived); None if none."""
        if self._records:
            return self._records.popleft()
        if self._read():
            return self._records.popleft()
        if timeout_ms <= 0:
            return None
        if self.spin_s > 0:  # a short poll before sleeping: a wake-up costs ~25 us here, a poll ~1 us
            until = time.perf_counter() + self.spin_s
            while time.perf_counter() < until:
                if self._poll.poll(0) and self._read():
                    return self._records.popleft()
                os.sched_yield()  # a rank with work to do on this core goes first
        if self._poll.poll(timeout_ms) and self._read():
            return self._records.popleft()
        return None

    def _read(self) -> bool:
        try:
            data = os.read(self._fd, PIPE_BYTES)
        except BlockingIOError:
            return False
        buf = self._buf + data if self._buf else data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            self._records.append(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
        self._buf = buf[pos:]
        return bool(self._records)

    def close(self) -> None:
        for fd in self._out.values():
            os.close(fd)
        self._out.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            try:
                os.unlink(inbox_path(self.dir, self.rank))
            except OSError:
                pass


def _grow(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # a smaller pipe only means senders wait for room more often


def spin_budget_s(local_ranks: int) -> float:
    """How long a receiver polls (yielding the core between polls) before it sleeps in the kernel.

    200 us while there are at most two ranks per core: the answer usually comes sooner than a
    sleep-and-wake-up cycle would take (measured, 8-byte all-reduce over shm: 2 ranks on 2 cores
    66 -> 40 us, 4 ranks 290 -> 100-190 us). 0 beyond that: with 8 ranks on 2 cores even yielding
    pollers slow the ranks that have work (MPICH's busy-polling collapses there).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return 200e-6 if local_ranks <= 2 * cores else 0.0
