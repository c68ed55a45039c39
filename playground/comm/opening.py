"""A rank's local end of a transport, made in two steps around the rendezvous.

First the rank opens its local end (a bound ZeroMQ socket, or its shared-memory mailboxes), whose
address goes into the coordinator's table; every end exists before any rank leaves the rendezvous,
so no first message can miss it. Once the table with every peer's address is back, `connect`
returns the finished transport. Which end each transport kind opens is in registry.py; a launched
rank opens its own in playground/rendezvous/join.py, an in-process world in world.py.
"""

import os
from typing import Protocol

import zmq

from playground.comm.addresses import local_ip_towards
from playground.comm.mailbox import mailbox_path, open_mailboxes, spin_policy
from playground.comm.shm import SHM_MIN_BYTES, ShmChannels
from playground.comm.shm_stream import CELL_BYTES
from playground.comm.shm_transport import ShmTransport
from playground.comm.transport import Transport
from playground.comm.zmq_transport import RING_MIN_BYTES, SOCKET_BUFFER_BYTES, ZmqTransport


class End(Protocol):
    """What every kind's local end offers: its addresses for the table, then the transport."""

    endpoint: str  # where peers reach it
    local_endpoint: str  # where peers on the same host reach it ("": at `endpoint` too)

    def connect(self, endpoints: list[str]) -> Transport: ...

    def close(self) -> None: ...


class ZmqEnd:
    """The rank's PULL socket, bound on ipc:// in `ipc_directory` (one host), on tcp:// on the
    address that routes towards `master_addr` (reachable from other hosts), or, for "ipc+tcp"
    (emulated hosts), on both: `endpoint` is the tcp one, `local_endpoint` the ipc one that ranks
    on the same host use (a path in the file system the hosts share). With `shm_directory` (ipc
    only), large arrays' bytes go through shared-memory rings there (zmq_transport.py)."""

    def __init__(
        self,
        ctx: zmq.Context,
        rank: int,
        kind: str,
        ipc_directory: str,
        master_addr: str,
        shm_directory: str | None = None,
    ):
        self.ctx, self.rank, self.kind = ctx, rank, kind
        self.shm_dir = shm_directory if kind == "ipc" and ipc_ring_min_bytes() else None
        sock = self.sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.RCVBUF, SOCKET_BUFFER_BYTES)  # as the senders' SNDBUF
        sock.setsockopt(zmq.LINGER, 0)
        self.local_endpoint = ""
        if kind == "ipc":
            self.endpoint = self._bind_ipc(ipc_directory)
            return
        host = local_ip_towards(master_addr)
        sock.bind(f"tcp://{'127.0.0.1' if host == '127.0.0.1' else '*'}:0")
        port = sock.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]
        self.endpoint = f"tcp://{host}:{port}"
        if kind == "ipc+tcp":
            self.local_endpoint = self._bind_ipc(ipc_directory)

    def _bind_ipc(self, ipc_directory: str) -> str:
        path = os.path.join(ipc_directory, f"rank-{self.rank}.sock")
        os.makedirs(ipc_directory, exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        self.sock.bind(f"ipc://{path}")
        return f"ipc://{path}"

    def connect(self, endpoints: list[str]) -> ZmqTransport:
        if self.shm_dir is None:
            return ZmqTransport(self.rank, self.ctx, self.sock, endpoints, self.kind)
        channels = ShmChannels(self.rank, self.shm_dir)
        return ZmqTransport(
            self.rank, self.ctx, self.sock, endpoints, self.kind, channels, ipc_ring_min_bytes()
        )

    def close(self) -> None:
        self.sock.close(linger=0)


class ShmEnd:
    """The rank's mailboxes in `directory` (the run's, in /dev/shm; its rings are made on first send)."""

    local_endpoint = ""

    def __init__(self, rank: int, world_size: int, directory: str):
        self.rank, self.dir, self.world_size = rank, directory, world_size
        self.mailboxes = open_mailboxes(directory, rank, world_size)
        self.endpoint = f"shm://{mailbox_path(directory, rank)}"

    def connect(self, endpoints: list[str]) -> ShmTransport:
        # PLAYGROUND_SHM_MIN_BYTES lets tests push tiny arrays through the rings, and
        # PLAYGROUND_SHM_CELL_BYTES through a stream's window a few bytes at a time.
        min_bytes = int(os.environ.get("PLAYGROUND_SHM_MIN_BYTES", SHM_MIN_BYTES))
        cell_bytes = int(os.environ.get("PLAYGROUND_SHM_CELL_BYTES", CELL_BYTES))
        channels = ShmChannels(self.rank, self.dir)
        return ShmTransport(
            self.rank, channels, self.mailboxes, min_bytes, spin_policy(self.world_size), cell_bytes
        )

    def close(self) -> None:
        self.mailboxes.close()


def ipc_ring_min_bytes() -> int:
    """From how many bytes an array's bytes take the shared-memory ring on the ipc path (0: never).
    PLAYGROUND_IPC_RING_MIN_BYTES=0 sends every byte through the sockets, to compare the two."""
    return int(os.environ.get("PLAYGROUND_IPC_RING_MIN_BYTES", RING_MIN_BYTES))
