"""A rank's side of the launcher's control plane, as the communicator sees it: aborts and progress.

The coordinator (playground.coordinator) tells every rank to abort when one fails; a rank notices
between the slices of its waits (`abort_reason`), so a dead peer becomes PeerLost within a slice.
Rank 0's `progress` reports drive the launcher's progress bar. Control messages are small JSON
objects on the rank's DEALER socket, kept apart from the data plane (rendezvous.py lists them).
"""

import json

import zmq


class LauncherLink:
    """The rank's DEALER socket to the coordinator, after rendezvous."""

    def __init__(self, sock: zmq.Socket, rank: int):
        self.sock, self.rank = sock, rank
        self.reason: str | None = None  # why the run was aborted, once it was

    def abort_reason(self) -> str | None:
        """Why the coordinator aborted the run, or None (non-blocking)."""
        while self.reason is None and self.sock.poll(0):
            msg = json.loads(self.sock.recv())
            if msg.get("type") == "abort":
                self.reason = msg.get("reason", "the run was aborted")
        return self.reason

    def progress(self, done: int, total: int, label: str = "") -> None:
        if self.rank == 0:
            self.sock.send(
                json.dumps({"type": "progress", "done": done, "total": total, "label": label}).encode()
            )
