"""Failure drills: a transport wrapper that makes one rank fail on purpose (a scenario's `fault:`).

It counts the rank's posts (arrays and objects); the post numbered `after_ops + 1` fires the
fault: `kill` (SIGKILL itself), `exit` (status 3), `hang` (sleep forever), `raise`
(FaultInjected), `slow` (from then on the rank's own work takes `slowdown.factor` times as long:
comm/slowdown.py), or `corrupt`: flip one bit of the first non-empty array posted from then on,
which the collectives' correctness check must catch. The bit is the second highest of the first
element (`flip_bit`): in a float the top exponent bit, in an integer 2**(bits-2), so the element
changes by at least 1 (0 -> 2.0, +-1 -> +-inf, |v| >= 2 -> almost 0) and no later addition of
the check's small integers can round the change away. With a sum every element of every message
reaches some rank's result, so the check catches the flip wherever it lands; with max or min a
changed element may lose to another rank's and leave the result right. A post that found no room does not count: it is retried.
Only the failing rank's transport is wrapped, so the others pay nothing. `on_fire(action, post)`
is told just before the fault acts (the launcher's worker records when, for result.json's events:
a rank that kills itself can say so only before).
"""

import os
import signal
import time

import numpy as np

from playground.comm.transport import NoRoom, Outgoing
from playground.core.errors import FaultInjected


class FaultyTransport:
    """`inner` with the scenario's fault armed on this rank."""

    def __init__(
        self, inner, rank: int, action: str, after_ops: int, request=None, on_fire=None, slowdown=None
    ):
        self.inner, self.rank, self.action, self.after_ops = inner, rank, action, after_ops
        self.request = request  # asks the launcher for a host drill
        self.on_fire = on_fire  # (action, post number): told just before the fault acts
        self.slowdown = slowdown  # slow: the rank's account (comm/slowdown.py), charged on every post
        self.name, self.segment_bytes = inner.name, inner.segment_bytes
        self.num_ops = 0
        self.armed = True
        self._flipped: Outgoing | None = None

    def _fire_if_due(self, array: bool) -> bool:
        """Fire the fault if this post is the one; True means: corrupt this array."""
        if not self.armed or self.num_ops < self.after_ops:
            return False
        if self.action == "corrupt":
            return array
        self.armed = False
        self._tell()
        if self.action == "slow":
            self.slowdown.arm()
            return False
        if self.request is not None and self.action in ("cut_link", "kill_host"):
            self.request(self.action)
            return False
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "exit":
            os._exit(3)
        if self.action == "hang":
            while True:
                time.sleep(3600)
        raise FaultInjected(self.rank, self.after_ops)

    def _tell(self) -> None:
        if self.on_fire is not None:
            self.on_fire(self.action, self.num_ops + 1)

    def _count(self, got, corrupted: bool = False):
        if not isinstance(got, NoRoom):
            self.num_ops += 1
            if corrupted:
                self.armed = False
        return got

    def _charge(self) -> None:
        if self.slowdown is not None:
            self.slowdown.before_post()

    def send(self, dst: int, tag: int, x: np.ndarray):
        self._charge()
        corrupt = self._fire_if_due(x.nbytes > 0)
        if corrupt:
            self._tell()
            x = np.ascontiguousarray(x).copy()
            flip_bit(x)
        return self._count(self.inner.send(dst, tag, x), corrupt)

    def reserve(self, dst: int, count: int, dtype: np.dtype):
        return self.inner.reserve(dst, count, dtype)

    def send_reserved(self, out: Outgoing, tag: int):
        self._charge()
        corrupt = self._fire_if_due(out.array.nbytes > 0)
        if corrupt and self._flipped is not out:  # flip once, even if the post is retried
            self._tell()
            flip_bit(out.array)
            self._flipped = out
        return self._count(self.inner.send_reserved(out, tag), corrupt)

    def send_obj(self, dst: int, tag: int, body: bytes):
        self._charge()
        self._fire_if_due(False)
        return self._count(self.inner.send_obj(dst, tag, body))

    def receive(self, timeout_ms: int):
        if self.slowdown is None:
            return self.inner.receive(timeout_ms)
        cpu0 = time.thread_time()  # waiting is not the rank's work: not stretched
        try:
            return self.inner.receive(timeout_ms)
        finally:
            self.slowdown.exclude(time.thread_time() - cpu0)

    def close(self) -> None:
        self.inner.close()


def flip_bit(x: np.ndarray) -> None:
    """Flip the second highest bit of `x`'s first element, in place (x C-contiguous, not empty)."""
    x.reshape(-1).view(np.uint8)[x.itemsize - 1 if x.dtype.byteorder != ">" else 0] ^= 0x40
