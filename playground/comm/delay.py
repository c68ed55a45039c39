"""Link delay between emulated hosts: a transport wrapper that releases each message to a rank on
another host `delay` after it was posted. This kernel has no netem, so the delay cannot be the
kernel's; it is the sending rank's.

How. A post to a rank on another host copies the message at once and completes (as a send into a
kernel socket buffer does: the sender never waits for the delay), and queues it with due time =
post time + delay (plus a `delay_link` drill's extra delay when either end's host is the drill's).
One background thread per rank releases queued messages when due, in due order, through its own
ZeroMQ PUSH sockets to those peers: ZeroMQ sockets are not thread-safe, so the inner transport's
sockets are never touched from it. Every message of this rank to another host passes through that
one thread, and a peer's due times never decrease (the extra delay only starts, it never stops), so
per (sender, receiver) order is kept. Messages to ranks on the same host go straight to the inner
transport, undelayed.

Why send-side. Delaying where the message is posted, before tcp, leaves the link's tbf shaping the
real bytes and needs nothing from the receiver. What it does not model: only messages are delayed,
not packets, so tcp's acknowledgements are not, and tcp never sees a longer round trip (a transfer
is not window-limited by the delay as on a long fat pipe); no jitter, loss or reordering; the copy
at post time costs the sender memory bandwidth a NIC would not.

Timing. A thread that sleeps until a due time runs tens of microseconds later on a loaded machine
(waking, taking the interpreter, the send call), which would add itself to every delay: 200 us
measured as 225-275 us here. So the thread asks for 1 ns timer slack (Linux's default is 50 us), wakes
`lead` early, where `lead` is the 90th percentile of how late its recent wake-ups were (at most
MAX_LEAD_S and half the delay), and, woken early, waits out the rest awake, yielding the processor.
No message leaves before its due time, and about nine in ten leave on it; the rest as late as the
thread woke past the lead. README.md has the measured rise of alpha.
"""

import ctypes
import heapq
import itertools
import os
import threading
import time
from collections import deque

import numpy as np
import zmq

from playground.comm import wire
from playground.comm.transport import COMPLETE, Outgoing
from playground.comm.zmq_transport import SOCKET_BUFFER_BYTES, ZERO_COPY_MIN_BYTES
from playground.core.errors import LabError

_U1 = np.dtype("u1")
_PR_SET_TIMERSLACK = 29
CLOSE_WAIT_S = 1.0
LEAD_SAMPLES = 32  # recent wake-ups whose lateness sets the lead
LEAD_QUANTILE = 0.9
MAX_LEAD_S = 200e-6


def precise_sleeps() -> None:
    """Ask Linux to wake this thread when its timeout ends, not up to 50 us later (the default slack)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class DelayedTransport:
    """`inner` with messages to other hosts held back by `delay_s` (see the module docstring).

    `endpoints[p]` is where this rank sends to peer p (its tcp endpoint for a peer on another host);
    `hosts[p]` is p's host. `extra` is a `delay_link` drill: (host, extra delay s, monotonic time
    from which it applies), or None.
    """

    def __init__(
        self,
        inner,
        rank: int,
        ctx: zmq.Context,
        endpoints: list[str],
        hosts: list[str],
        delay_s: float,
        extra: tuple[str, float, float] | None = None,
    ):
        self.inner, self.rank, self.delay_s, self.extra = inner, rank, delay_s, extra
        self.name, self.segment_bytes = inner.name, inner.segment_bytes
        self._ctx, self._endpoints, self._hosts = ctx, endpoints, hosts
        self._remote = [h != hosts[rank] for h in hosts]
        self._queue: list[tuple] = []  # heap of (due, seq, dst, frames)
        self._seq = itertools.count()
        self._last_due: dict[int, float] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.lead_s = 0.0  # how early the thread wakes for a due message (see the module docstring)
        self._lateness: deque[float] = deque(maxlen=LEAD_SAMPLES)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._release_loop, name=f"delay-rank-{rank}", daemon=True)
        self._thread.start()

    def __repr__(self):
        return f"DelayedTransport({self.inner.name}, {self.delay_s * 1e6:g} us to other hosts)"

    def delay_to(self, dst: int, now: float) -> float:
        """The one-way delay of a message to `dst` posted at monotonic time `now`."""
        delay = self.delay_s
        if self.extra is not None:
            host, extra_s, start = self.extra
            if now >= start and host in (self._hosts[self.rank], self._hosts[dst]):
                delay += extra_s
        return delay

    # -- posting ---------------------------------------------------------------------------
    def _queue_frames(self, dst: int, frames: tuple):
        if self.error is not None:
            raise LabError(
                f"rank {self.rank}: the delayed-send thread failed: {self.error!r}", step="delayed send"
            )
        now = time.monotonic()
        due = max(now + self.delay_to(dst, now), self._last_due.get(dst, 0.0))
        self._last_due[dst] = due
        seq = next(self._seq)
        with self._cond:
            heapq.heappush(self._queue, (due, seq, dst, frames))
            if self._queue[0][1] == seq:  # the new head: the thread must wake sooner than it planned
                self._cond.notify()
        return COMPLETE

    def _array_frames(self, tag: int, x: np.ndarray, owned: bool) -> tuple:
        if x.nbytes < ZERO_COPY_MIN_BYTES:
            return (wire.encode_inline(self.rank, tag, x),)
        header = wire.encode_header(self.rank, tag, wire.KIND_ARRAY_FRAME, x.dtype, x.shape)
        return (header, x if owned else x.copy())

    def send(self, dst: int, tag: int, x: np.ndarray):
        if not self._remote[dst]:
            return self.inner.send(dst, tag, x)
        return self._queue_frames(dst, self._array_frames(tag, x, owned=False))

    def reserve(self, dst: int, count: int, dtype: np.dtype):
        if not self._remote[dst]:
            return self.inner.reserve(dst, count, dtype)
        return Outgoing(dst, np.empty(count, dtype))

    def send_reserved(self, out: Outgoing, tag: int):
        if not self._remote[out.dst]:
            return self.inner.send_reserved(out, tag)
        return self._queue_frames(out.dst, self._array_frames(tag, out.array, owned=True))

    def send_obj(self, dst: int, tag: int, body: bytes):
        if not self._remote[dst]:
            return self.inner.send_obj(dst, tag, body)
        header = wire.encode_header(self.rank, tag, wire.KIND_JSON, _U1, ())
        return self._queue_frames(dst, (header, bytes(body)))

    def receive(self, timeout_ms: int):
        return self.inner.receive(timeout_ms)

    # -- the release thread ----------------------------------------------------------------
    def _next_due(self) -> tuple | None:
        """The next message once it is due, or up to `lead_s` before (the caller waits out the rest);
        None when closed. Woken by its timeout, the thread takes the message even if its newly learnt lead
        says it could sleep a little longer: another sleep would cost another wake-up."""
        woke_for = None
        with self._cond:
            while not self._closed:
                if not self._queue:
                    self._cond.wait()
                    continue
                due = self._queue[0][0]
                target = due - self.lead_s
                if due == woke_for or target <= time.monotonic():
                    return heapq.heappop(self._queue)
                self._cond.wait(target - time.monotonic())
                if self._queue and self._queue[0][0] == due:  # woke for it (not for a new head): how late?
                    self._learn(time.monotonic() - target)
                    woke_for = due
            return None

    def _learn(self, late_s: float) -> None:
        self._lateness.append(late_s)
        late = sorted(self._lateness)[int(LEAD_QUANTILE * len(self._lateness))]
        self.lead_s = min(MAX_LEAD_S, self.delay_s / 2, max(0.0, late))

    def _release_loop(self) -> None:
        precise_sleeps()
        sockets: dict[int, zmq.Socket] = {}
        try:
            while (item := self._next_due()) is not None:
                due, _, dst, frames = item
                while time.monotonic() < due:  # woke early by the lead: never release before due
                    os.sched_yield()
                sock = sockets.get(dst)
                if sock is None:
                    sock = sockets[dst] = self._ctx.socket(zmq.PUSH)
                    sock.setsockopt(zmq.SNDHWM, 0)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
                    sock.connect(self._endpoints[dst])
                for frame in frames[:-1]:
                    sock.send(frame, zmq.SNDMORE)
                sock.send(frames[-1], copy=len(frames) == 1)
        except BaseException as e:  # noqa: BLE001 - reported by the next post
            self.error = e
        finally:
            for sock in sockets.values():
                sock.close(linger=0)

    def close(self) -> None:
        """Stop the thread (messages not yet due are dropped: the run is over) and close `inner`."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(CLOSE_WAIT_S)
        self.inner.close()
