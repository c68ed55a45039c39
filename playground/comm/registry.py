"""The transports, one line each: every list of transport names derives from here.

`run --transport`, `bench --transport`, a scenario's `transport:` key and its `Literal` type take
the launched kinds (`LAUNCHED`); tests open in-process worlds of any kind with a factory here
(`comm/world.py`). Adding a transport is its module (the `Transport` protocol of transport.py) and
one `TransportKind(...)` line below: `open_end(rank, world_size, places)` makes a rank's local end
(its address goes into the rendezvous table; `end.connect(endpoints)` then gives the transport).
The rest of the framework asks an entry what it can do (`uses_shm`, `pinnable`, `crosses_hosts`),
never compares its name.

`sim` is listed for its name and words; the simulator builds its own transports (playground/sim/).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import zmq

from playground.comm.opening import End, ShmEnd, ZmqEnd
from playground.core.errors import UsageError


@dataclass(frozen=True)
class Places:
    """Where a world's ends live: ipc sockets in `ipc_dir`, shared memory in `shm_dir`, tcp on the
    address that routes towards `master_addr`; `ctx` for the ZeroMQ kinds."""

    ipc_dir: str
    shm_dir: str
    master_addr: str = "127.0.0.1"
    ctx: zmq.Context | None = None


@dataclass(frozen=True)
class TransportKind:
    name: str
    summary: str
    launched: bool  # a run can use it: `run --transport NAME`
    uses_zmq: bool = False  # its ends need a ZeroMQ context
    uses_shm: bool = False  # it keeps files in the run's /dev/shm directory
    # its ranks poll their mailboxes on their own thread, with no I/O thread of the transport's: a
    # rank with a CPU of its own gains (launch.rank_cpus pins it, join.open_end nudges it there)
    pinnable: bool = False
    open_end: Callable[[int, int, Places], End] | None = None
    # a rank's end when the run has emulated hosts (inside a host as itself, tcp across them);
    # None: the kind is one host only, and a scenario with `hosts:` cannot use it
    open_end_across_hosts: Callable[[int, int, Places], End] | None = None

    @property
    def crosses_hosts(self) -> bool:
        return self.open_end_across_hosts is not None


def _context(at: Places) -> zmq.Context:
    """The ZeroMQ context a ZeroMQ kind's end is made in (`Places.ctx`, which it needs)."""
    if at.ctx is None:
        raise UsageError("a ZeroMQ transport's end needs a ZeroMQ context: Places(ctx=...)")
    return at.ctx


def _zmq_end(kind: str) -> Callable[[int, int, Places], End]:
    """The opener of a ZeroMQ end of ZmqEnd's `kind`: ipc, tcp, or ipc+tcp (ipc inside a host,
    tcp across emulated hosts)."""
    return lambda rank, size, at: ZmqEnd(_context(at), rank, kind, at.ipc_dir, at.master_addr, at.shm_dir)


KINDS: tuple[TransportKind, ...] = (
    TransportKind(
        "ipc",
        "ZeroMQ over Unix sockets, one host; large arrays' bytes through /dev/shm rings",
        launched=True,
        uses_zmq=True,
        uses_shm=True,
        open_end=_zmq_end("ipc"),
        open_end_across_hosts=_zmq_end("ipc+tcp"),
    ),
    TransportKind(
        "tcp",
        "ZeroMQ over TCP: any hosts (external launchers always use it)",
        launched=True,
        uses_zmq=True,
        open_end=_zmq_end("tcp"),
        open_end_across_hosts=_zmq_end("tcp"),
    ),
    TransportKind(
        "shm",
        "shared-memory mailboxes and rings, one host: no ZeroMQ in the data path",
        launched=True,
        uses_shm=True,
        pinnable=True,
        open_end=lambda rank, size, at: ShmEnd(rank, size, at.shm_dir),
    ),
    TransportKind("local", "threads in one process, a queue per rank (fast tests)", launched=False),
    TransportKind("sim", "simulated ranks in virtual time, one process (`simulate`)", launched=False),
)
BY_NAME: dict[str, TransportKind] = {k.name: k for k in KINDS}
LAUNCHED: tuple[str, ...] = tuple(k.name for k in KINDS if k.launched)
if TYPE_CHECKING:  # a scenario's `transport:` type: a Literal of LAUNCHED at run time, a string to mypy
    LaunchedKind = str
else:
    LaunchedKind = Literal[LAUNCHED]
IN_PROCESS: tuple[str, ...] = tuple(k.name for k in KINDS if k.name != "sim")  # comm/world.py opens these
