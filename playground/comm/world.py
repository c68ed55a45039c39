"""Worlds of ranks inside one process: every rank a thread, over any transport kind.

How tests run the same code over every transport without a launcher, and how a schedule is tried
quickly: `open_world` opens every rank's end (registry.py says which) and connects them;
`run_local` runs a function on one thread per rank, each with a real `Communicator`, with the
launcher's abort rule (a rank that fails makes the others' waits raise PeerLost).
"""

import queue
import threading

import zmq

from playground.comm import registry
from playground.comm.communicator import Communicator
from playground.comm.local import LocalTransport
from playground.comm.transport import Message
from playground.core.errors import PeerLost, UsageError, WaitTimeout


def open_world(kind: str, size: int, directory: str, ctx: zmq.Context | None = None) -> list:
    """Transports of `kind` for all `size` ranks of a world inside this process (each rank then
    runs on its own thread). ipc sockets and shared-memory files go into `directory`; ZeroMQ kinds
    need `ctx`."""
    if kind == "local":
        inboxes: list[queue.SimpleQueue[Message]] = [queue.SimpleQueue() for _ in range(size)]
        return [LocalTransport(rank, inboxes) for rank in range(size)]
    found = registry.BY_NAME.get(kind)
    if found is None or found.open_end is None:
        raise UsageError(f"no in-process world of {kind!r}; allowed: {', '.join(registry.IN_PROCESS)}")
    places = registry.Places(ipc_dir=directory, shm_dir=directory, ctx=ctx)
    ends = [found.open_end(rank, size, places) for rank in range(size)]
    endpoints = [end.endpoint for end in ends]
    return [end.connect(endpoints) for end in ends]


class _SharedAbort:
    """The launcher's role in one process: when a rank fails, the others' waits raise PeerLost."""

    def __init__(self):
        self.reason: str | None = None

    def abort_reason(self) -> str | None:
        return self.reason

    def progress(self, done: int, total: int, label: str = "") -> None:
        pass


def run_local(
    size: int,
    fn,
    timeout_s: float = 30.0,
    transport: str = "local",
    directory: str | None = None,
    wrap=None,
) -> list:
    """Run fn(comm) on `size` threads, one Communicator each; returns each rank's result.

    `transport` is "local" (queues) or any real kind, "ipc", "tcp", "shm", with its sockets and
    shared memory in `directory` (opening.open_world). `wrap(rank, transport)` may put a wrapper
    around a rank's transport (a `comm.faults.FaultyTransport`: a drill in one process). When a
    rank raises, the others are aborted (PeerLost) and the first error is re-raised here.
    """
    ctx = zmq.Context() if registry.BY_NAME[transport].uses_zmq else None
    transports = open_world(transport, size, directory or "", ctx)
    if wrap is not None:
        transports = [wrap(rank, t) for rank, t in enumerate(transports)]
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
