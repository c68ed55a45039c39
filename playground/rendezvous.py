"""How ranks find each other: a coordinator (ROUTER) and each rank's control socket (DEALER).

Control messages are small JSON objects, kept apart from the data plane:
  rank -> coordinator: register {rank, host, pid, endpoint, local_endpoint, t_us}, progress {...},
                       done {rank, result}, error {rank, error_type, message, traceback},
                       heartbeat {rank} (own socket), fault {rank, action} (a drill's request)
  coordinator -> rank: table {endpoints, local_endpoints, hosts, host, t_us}, release {},
                       abort {reason}
A rank learns who it is from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as under
torchrun; MPICH's PMI_*, Open MPI's OMPI_COMM_WORLD_* and Slurm's SLURM_* map onto them).

Its host is PLAYGROUND_HOST when set (the emulated hosts' launcher sets it), else the host name,
qualified by the network namespace when the rank runs in a named one: emulated hosts share one
host name and one file system, so a host name alone would put them all on one host.
"""

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass

import zmq

from playground.errors import CommTimeout, PeerLost
from playground.hosts import netns
from playground.trace import now_us

_ENV_ALIASES = {
    "RANK": ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"),
    "WORLD_SIZE": ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"),
}


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ=None) -> "RankEnv":
        env = os.environ if environ is None else environ

        def first(name):
            for alias in _ENV_ALIASES.get(name, (name,)):
                if env.get(alias) not in (None, ""):
                    return env[alias]
            raise ValueError(f"{name} is not set (set {' or '.join(_ENV_ALIASES.get(name, (name,)))})")

        rank, size = int(first("RANK")), int(first("WORLD_SIZE"))
        if not 0 <= rank < size:
            raise ValueError(f"RANK {rank} is outside 0..{size - 1}")
        return cls(rank, size, env.get("MASTER_ADDR", "127.0.0.1"), int(first("MASTER_PORT")))

    @property
    def coordinator(self) -> str:
        return f"tcp://{self.master_addr}:{self.master_port}"


def host_identity(environ=None) -> str:
    """Which host this process is on, for placing peers (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("PLAYGROUND_HOST"):
        return env["PLAYGROUND_HOST"]
    ns = netns.current_name()
    return f"{socket.gethostname()}/{ns}" if ns else socket.gethostname()


@dataclass(frozen=True)
class Peers:
    """The coordinator's table: each rank's endpoint (reachable from any host), its endpoint for
    ranks on the same host ("" if none), and its host."""

    endpoints: list[str]
    local_endpoints: list[str]
    hosts: list[str]

    @classmethod
    def from_table(cls, table: dict) -> "Peers":
        n = len(table["endpoints"])
        return cls(
            table["endpoints"], table.get("local_endpoints") or [""] * n, table.get("hosts") or [""] * n
        )


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


def local_ip_towards(addr: str) -> str:
    """This host's address on the route to `addr` (what peers on other hosts can reach)."""
    if is_loopback(addr):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))
        return s.getsockname()[0]


def ipc_dir(master_port: int) -> str:
    return os.environ.get("PLAYGROUND_IPC_DIR") or os.path.join(
        tempfile.gettempdir(), f"playground-{master_port}"
    )


def send_ctrl(sock: zmq.Socket, msg: dict) -> None:
    sock.send(json.dumps(msg, default=_jsonable).encode())


def _jsonable(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def recv_ctrl(sock: zmq.Socket, want: str, timeout_s: float, rank: int) -> dict:
    """The next control message of type `want`; an abort raises PeerLost, silence CommTimeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000) + 1):
            if time.monotonic() >= deadline:
                raise CommTimeout(rank, f"{want} from the coordinator", None, None, timeout_s)
            continue
        msg = json.loads(sock.recv())
        if msg.get("type") == "abort":
            raise PeerLost(rank, msg.get("reason", "the run was aborted"))
        if msg.get("type") == want:
            return msg


def join(
    ctrl: zmq.Socket, env: RankEnv, endpoint: str, timeout_s: float, local_endpoint: str = ""
) -> tuple[Peers, float]:
    """Register with the coordinator; returns the table of every rank and this host's clock offset (us)."""
    t0 = now_us()
    send_ctrl(
        ctrl,
        {
            "type": "register",
            "rank": env.rank,
            "host": host_identity(),
            "pid": os.getpid(),
            "endpoint": endpoint,
            "local_endpoint": local_endpoint,
            "t_us": t0,
        },
    )
    table = recv_ctrl(ctrl, "table", timeout_s, env.rank)
    offset = 0.0
    if table.get("host") != socket.gethostname():
        # Another host's CLOCK_MONOTONIC has another origin: estimate it NTP-style, best of 5 pings.
        samples = []
        for _ in range(5):
            t0 = now_us()
            send_ctrl(ctrl, {"type": "clock", "rank": env.rank})
            t_coord = recv_ctrl(ctrl, "clock", timeout_s, env.rank)["t_us"]
            t1 = now_us()
            samples.append((t1 - t0, t_coord - (t0 + t1) / 2))
        offset = min(samples)[1]
    return Peers.from_table(table), offset
