"""A rank's side of the launcher's control plane, as the communicator sees it: aborts and progress.

The coordinator (playground.rendezvous.coordinator) tells every rank to abort when one fails; a rank notices
between the slices of its waits (`abort_reason`, asked by the Communicator's `check_abort`), so a
dead peer becomes PeerLost within a slice.
Rank 0's `progress` reports drive the launcher's progress bar. Control messages are small JSON
objects on the rank's DEALER socket, kept apart from the data plane (rendezvous/join.py lists them);
the coordinator knows each rank's sockets by the identities below.
With emulated hosts a rank also sends heartbeats (`Heartbeat`), so that a rank the coordinator can
no longer hear from, behind a cut link, is declared lost within seconds.
"""

import json
import threading
from typing import TYPE_CHECKING

import zmq

from playground.core.errors import PeerLost


def control_identity(rank: int, generation: int = 0) -> bytes:
    """The ZeroMQ identity of rank r's control socket: the coordinator takes a rank's messages only
    from it. A restarted group's sockets (generation g > 0) have their own, so a socket of the
    group before cannot stand in for one of the group now."""
    return f"rank-{rank}".encode() if generation == 0 else f"rank-{rank}.g{generation}".encode()


def heartbeat_identity(rank: int, generation: int = 0) -> bytes:
    """The ZeroMQ identity of rank r's heartbeat socket (emulated hosts)."""
    return f"heartbeat-{rank}".encode() if generation == 0 else f"heartbeat-{rank}.g{generation}".encode()


class LauncherLink:
    """The rank's DEALER socket to the coordinator, after rendezvous; every message it sends carries
    the rank's rendezvous `generation` (0, or the restart it belongs to)."""

    def __init__(self, sock: zmq.Socket, rank: int, generation: int = 0):
        self.sock, self.rank, self.generation = sock, rank, generation
        self.reason: str | None = None  # why the run was aborted, once it was
        self.abort: dict = {}  # the abort message itself (a live recovery reads `lost` from it)

    def abort_reason(self) -> str | None:
        """Why the coordinator aborted the run, or None (non-blocking)."""
        while self.reason is None and self.sock.poll(0):
            msg = json.loads(self.sock.recv())
            if msg.get("type") == "abort":
                self.reason = msg.get("reason", "the run was aborted")
                self.abort = msg
        return self.reason

    def progress(self, done: int, total: int, label: str = "") -> None:
        if self.rank == 0:
            self.send({"type": "progress", "done": done, "total": total, "label": label})

    def send(self, msg: dict) -> None:
        """One control message (a type the coordinator knows: rendezvous/messages.py)."""
        self.sock.send(json.dumps({**msg, "generation": self.generation}).encode())


class LauncherServices:
    """What a Communicator offers over its `control` link (a LauncherLink, or None when nothing
    outside can abort the run): aborts turned into PeerLost, and progress. The Communicator is a
    LauncherServices."""

    if TYPE_CHECKING:  # what the Communicator this is mixed into provides (for the type checker)
        rank: int
        control: LauncherLink | None

        def op_context(self, peer: int | None = None) -> str: ...

    def check_abort(
        self, src: int | None = None, tag: int | None = None, op: str = "", direction: str = "from"
    ) -> None:
        """Raise PeerLost if the launcher has aborted the run; name what this rank was waiting for.

        A node that waits on its own sockets (a server loop) calls this between polls."""
        reason = self.control.abort_reason() if self.control is not None else None
        if reason:
            raise PeerLost(
                self.rank, reason, peer=src, tag=tag, op=op, direction=direction, context=self.op_context(src)
            )

    def progress(self, done: int, total: int, label: str = "") -> None:
        """Advance the launcher's progress bar (only rank 0's reports are shown)."""
        if self.control is not None:
            self.control.progress(done, total, label)

    def notify(self, msg: dict) -> None:
        """Tell the launcher something it records (a `resumed` report: how this rank came back
        from a checkpoint); nothing when no launcher listens."""
        if self.control is not None:
            self.control.send(msg)


HEARTBEAT_INTERVAL_S = 0.25


class Heartbeat:
    """Tells the coordinator every `interval_s` that this rank is alive and can reach it, from its own
    thread and its own DEALER socket (ZeroMQ sockets are not thread-safe: the control socket stays the
    rank's). It beats whatever the rank's main thread does, waiting or computing (Python hands the
    interpreter to a waiting thread at least every 5 ms), so only a rank that is stopped, killed or cut
    off from the coordinator, as by a cut host link, goes silent."""

    def __init__(
        self,
        ctx: zmq.Context,
        endpoint: str,
        rank: int,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        generation: int = 0,
    ):
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat,
            args=(ctx, endpoint, rank, interval_s, generation),
            name=f"heartbeat-rank-{rank}",
            daemon=True,
        )
        self._thread.start()

    def _beat(self, ctx: zmq.Context, endpoint: str, rank: int, interval_s: float, generation: int) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 4)  # while the coordinator is unreachable, stale beats are dropped
        sock.setsockopt(zmq.IDENTITY, heartbeat_identity(rank, generation))
        sock.connect(endpoint)
        beat = json.dumps({"type": "heartbeat", "rank": rank, "generation": generation}).encode()
        try:
            while True:
                try:
                    sock.send(beat, zmq.NOBLOCK)
                except zmq.Again:
                    pass
                if self._stop.wait(interval_s):
                    return
        finally:
            sock.close(linger=0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
