"""An in-process transport: one thread per rank, a queue per rank instead of sockets.

`run_local` runs a function on N threads, each with a real `Communicator` over this transport,
so the production matching, deadlines and abort code run too: large correctness grids are fast
(no processes) and a schedule can be tried without a launcher. Messages are copied at send time
(the sender may reuse its array at once, as with a buffered MPI send). Real runs go over ZeroMQ
or shared memory.
"""

import queue
import threading

import numpy as np
import zmq

from playground.comm.communicator import Communicator
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_OBJ, Message, PlainReserve
from playground.errors import PeerLost, WaitTimeout

SEGMENT_BYTES = 1 << 20
_U1 = np.dtype("u1")


class LocalTransport(PlainReserve):
    """Rank `rank`'s side of `inboxes` (one queue per rank, shared by all threads)."""

    name = "local"
    segment_bytes = SEGMENT_BYTES

    def __init__(self, rank: int, inboxes: list[queue.SimpleQueue]):
        self.rank, self.inboxes = rank, inboxes

    def send(self, dst: int, tag: int, x: np.ndarray):
        arr = x.copy()
        arr.flags.writeable = False
        self.inboxes[dst].put(Message(self.rank, tag, KIND_ARRAY, arr.dtype, arr.shape, arr))
        return COMPLETE

    def send_obj(self, dst: int, tag: int, body: bytes):
        self.inboxes[dst].put(Message(self.rank, tag, KIND_OBJ, _U1, (), body))
        return COMPLETE

    def receive(self, timeout_ms: int) -> Message | None:
        try:
            if timeout_ms <= 0:
                return self.inboxes[self.rank].get_nowait()
            return self.inboxes[self.rank].get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


class _SharedAbort:
    """The launcher's role in one process: when a rank fails, the others' waits raise PeerLost."""

    def __init__(self):
        self.reason: str | None = None

    def abort_reason(self) -> str | None:
        return self.reason

    def progress(self, done: int, total: int, label: str = "") -> None:
        pass


def run_local(
    size: int, fn, timeout_s: float = 30.0, transport: str = "local", directory: str | None = None
) -> list:
    """Run fn(comm) on `size` threads, one Communicator each; returns each rank's result.

    `transport` is "local" (queues) or any real kind, "ipc", "tcp", "shm", with its sockets and
    shared memory in `directory` (opening.open_world). When a rank raises, the others are aborted
    (PeerLost) and the first error is re-raised here.
    """
    from playground.comm.opening import open_world  # opening imports this module

    ctx = zmq.Context() if transport in ("ipc", "tcp") else None
    transports = open_world(transport, size, directory or "", ctx)
    control = _SharedAbort()
    results: list = [None] * size
    errors: list = []

    def body(rank):
        comm = Communicator(rank, size, transports[rank], timeout_s=timeout_s, control=control)
        try:
            results[rank] = fn(comm)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)
            if not isinstance(e, PeerLost) and control.reason is None:
                control.reason = f"rank {rank} failed: {type(e).__name__}: {e}"

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 5)
    finally:
        if not any(t.is_alive() for t in threads):
            for t in transports:
                t.close()
            if ctx is not None:
                ctx.term()
    if errors:
        raise next((e for e in errors if not isinstance(e, PeerLost)), errors[0])
    if any(t.is_alive() for t in threads):
        raise WaitTimeout(
            f"run_local: ranks still running after {timeout_s + 5}s",
            what="the local ranks",
            waited_s=timeout_s + 5,
        )
    return results
