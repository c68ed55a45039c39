"""What a communication error says about where it happened: the collective running, the peer's host;
and the flight recorder's ring those collectives are written into.

NCCL's watchdog names the operation and its sequence number when a collective hangs; so does every
CommTimeout and PeerLost here. The collectives' dispatchers mark each call with
`begin_collective(name, algorithm, x, op)` ... `end_collective(ok)` (native/oprecord.c, no
allocation per call), and `op_context(peer)` turns the record into the text an error quotes: "in
allreduce ring #17; rank 3 is on host h1".

A collective given its input `x` (or its `op`) is *matched*: every rank must call the same one, and
its fingerprint (name, algorithm, dtype, bytes, op) travels in its messages' tags (optags.py), so
ranks that called different ones fail at once naming both (desync.py). A call without them only
names a region for errors (a pipeline stage's receive, a node's own step): its messages are not
checked. Groups give their tag offset and their own count (`group`, `group_seq`), so the ranks of one
group number its collectives alike whatever other groups they are in.

Each begin, end and point-to-point operation outside a collective is also an entry of the flight
ring (flight.py), attached with `attach_flight`: in a file of the run directory for a launched rank.
"""

import contextlib
from pathlib import Path

from playground.comm import flight


class OpRecord:
    """The collective running (or the last one), each rank's host, and the flight ring, for error
    messages and the flight recorder. The Communicator's `begin_collective`, `end_collective`,
    `current_op`, `last_op` and `num_collectives` are native (CommCore)."""

    rank: int  # the Communicator's, which this is mixed into (an annotation: no class attribute)
    size: int

    def _init_op_record(self, size: int, hosts: list[str] | None) -> None:
        self.hosts = list(hosts) if hosts is not None else ["localhost"] * size  # each rank's host
        self.flight_path: Path | None = None
        self._flight_buffer = None

    def attach_flight(self, capacity: int, path: Path | None = None) -> None:
        """Keep the last `capacity` operations (rounded up to a power of two; 0: none) in a ring, in
        a file at `path` (mapped, readable from outside) or in this process's memory."""
        self._flight_attach(None)  # type: ignore[attr-defined]
        if self._flight_buffer is not None and hasattr(self._flight_buffer, "close"):
            self._flight_buffer.close()
        self._flight_buffer, self.flight_path = None, None
        if capacity <= 0:
            return
        capacity = 1 << (capacity - 1).bit_length()
        self._flight_buffer = flight.new_ring(self.rank, self.size, capacity, path)
        self._flight_attach(self._flight_buffer)  # type: ignore[attr-defined]
        self.flight_path = path

    def flight(self) -> flight.Ring | None:
        """This rank's ring as it is now (None without one)."""
        return None if self._flight_buffer is None else flight.decode(self._flight_buffer)

    @contextlib.contextmanager
    def collective(self, name: str, algorithm: str = "", x=None, op=None):
        """`with comm.collective(name, algorithm[, x, op]):` begin/end_collective around a block (a
        node's own collective-like step, a test); an exception marks it failed in the ring."""
        self.begin_collective(name, algorithm, x, op)  # type: ignore[attr-defined]
        try:
            yield self
        except BaseException:
            self.end_collective(False)  # type: ignore[attr-defined]
            raise
        self.end_collective()  # type: ignore[attr-defined]

    def op_context(self, peer: int | None = None) -> str:
        """ "in allreduce ring #17; rank 3 is on host h1": what an error adds to say where it happened."""
        parts = []
        current, last = self.current_op, self.last_op  # type: ignore[attr-defined]
        if current is not None:
            parts.append(f"in {_named(current)}")
            if last is not None and current[0].startswith("barrier"):  # it marks no work: name the one before
                parts[-1] += f", after {_named(last)}"
        elif last is not None:
            parts.append(f"after {_named(last)}")
        if peer is not None and self.hosts and len(set(self.hosts)) > 1 and 0 <= peer < len(self.hosts):
            parts.append(f"rank {peer} is on host {self.hosts[peer]}")
        return "; ".join(parts)

    @property
    def ranks_per_node(self) -> int:
        """How many ranks share this rank's host (what hierarchical algorithms group by)."""
        return self.hosts.count(self.hosts[self.rank])


def _named(op: tuple[str, str, int]) -> str:
    name, algorithm, seq = op
    return f"{name}{' ' + algorithm if algorithm else ''} #{seq}"
