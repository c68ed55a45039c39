"""Handles of non-blocking operations, like MPI.Request: `wait(timeout_s)` or `test()`.

`PendingOp` is what every handle is (the base of `SendRequest`, `RecvRequest` and `DONE`, what
`isend` and `irecv` return); a name of its own, so that it is not mistaken for a request message.

A request never waits blindly: `wait` sleeps in slices and between them asks its communicator
whether the run was aborted, so a peer that died turns a wait into PeerLost within a slice.
"""

import time

import numpy as np
from _playground_native import SendRequestCore

from playground.core.errors import CommTimeout

SLICE_S = 0.1  # longest single sleep of a wait; abort and deadline are checked between slices


class PendingOp:
    """Base: `wait(timeout_s=None)` returns the operation's result (None for sends); `test()`."""

    __slots__ = ()

    def wait(self, timeout_s: float | None = None):
        raise NotImplementedError

    def test(self) -> bool:
        raise NotImplementedError


class _Done(PendingOp):
    __slots__ = ()

    def wait(self, timeout_s=None):
        return None

    def test(self):
        return True


DONE = _Done()


class SendRequest(SendRequestCore, PendingOp):
    """A send whose array may not be modified until the transport's completion is done (zero-copy).

    SendRequestCore (native/comm_core.c) holds (comm, completion, peer, tag) and answers `test()`
    and a `wait()` that finds the send done in one C call each; a wait that must sleep is `_wait`."""

    __slots__ = ()

    def _wait(self, timeout_s=None):
        timeout_s = self.comm.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while not self.completion.wait(min(SLICE_S, max(0.0, deadline - time.monotonic()))):
            self.comm._drain()  # a lent send completes when its receiver reads it: free its way here
            self.comm.check_abort(self.peer, self.tag, "send completion", direction="to")
            if time.monotonic() >= deadline:
                raise CommTimeout(
                    self.comm.rank,
                    "send completion",
                    self.peer,
                    self.tag,
                    timeout_s,
                    what=f"send completion to rank {self.peer} tag {self.tag}",
                    direction="to",
                    context=self.comm.op_context(self.peer),
                )
        return None


class RecvRequest(PendingOp):
    """A receive started with `irecv`: `test()` says whether it has arrived, `wait()` returns it."""

    __slots__ = ("comm", "src", "tag", "out")

    def __init__(self, comm, src: int, tag: int, out: np.ndarray | None):
        self.comm, self.src, self.tag, self.out = comm, src, tag, out

    def test(self):
        return self.comm.has_message(self.src, self.tag)

    def wait(self, timeout_s=None):
        return self.comm.recv(self.src, self.tag, out=self.out, timeout_s=timeout_s)
