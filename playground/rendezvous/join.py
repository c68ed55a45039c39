"""How ranks find each other: a coordinator (ROUTER) and each rank's control socket (DEALER).

Control messages are small JSON objects, kept apart from the data plane:
  rank -> coordinator: register {rank, host, pid, endpoint, local_endpoint, t_us, scenario_hash,
                       scenario}, clock {rank, seq}, progress {...}, done {rank, result},
                       error {rank, error_type, message, traceback},
                       heartbeat {rank} (own socket), fault {rank, action} (a drill's request),
                       resumed {rank, step, load_s, ...} (went on from a checkpoint);
                       each with the rank's rendezvous `generation` (absent: 0), and the
                       coordinator refuses one of another generation than its own
  coordinator -> rank: table {endpoints, local_endpoints, hosts, host, t_us, clock}, clock {seq, t_us},
                       release {}, abort {reason, error?}
A rank learns who it is from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as under
torchrun; MPICH's PMI_*, Open MPI's OMPI_COMM_WORLD_* and Slurm's SLURM_* map onto them).

Its host is PLAYGROUND_HOST when set (the emulated hosts' launcher sets it), else the host name,
qualified by the network namespace when the rank runs in a named one: emulated hosts share one
host name and one file system, so a host name alone would put them all on one host.
"""

import json
import os
import socket
import time
from dataclasses import dataclass

import zmq

from playground.comm.addresses import ipc_dir, shm_dir_for
from playground.comm.mailbox import nudge_to_own_core
from playground.comm.registry import BY_NAME, Places
from playground.config.fingerprint import fingerprint
from playground.core.errors import CommTimeout, PeerLost, ScenarioMismatch, UsageError, WireError
from playground.core.machine import current_netns
from playground.tracing import clocks

_GENERATION = ("PLAYGROUND_GENERATION", "TORCHELASTIC_RESTART_COUNT")  # ours, torchrun's
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
    generation: int = 0  # the rendezvous generation: 0, or the restart of the group this rank is in

    @classmethod
    def from_environ(cls, environ=None) -> "RankEnv":
        env = os.environ if environ is None else environ

        def first(name):
            for alias in _ENV_ALIASES.get(name, (name,)):
                if env.get(alias) not in (None, ""):
                    return env[alias]
            raise UsageError(f"{name} is not set (set {' or '.join(_ENV_ALIASES.get(name, (name,)))})")

        rank, size = int(first("RANK")), int(first("WORLD_SIZE"))
        if not 0 <= rank < size:
            raise UsageError(f"RANK {rank} is outside 0..{size - 1}")
        generation = next((env[n] for n in _GENERATION if env.get(n) not in (None, "")), "0")
        return cls(
            rank, size, env.get("MASTER_ADDR", "127.0.0.1"), int(first("MASTER_PORT")), int(generation)
        )

    @property
    def coordinator(self) -> str:
        return f"tcp://{self.master_addr}:{self.master_port}"


def host_identity(environ=None) -> str:
    """Which host this process is on, for placing peers (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("PLAYGROUND_HOST"):
        return env["PLAYGROUND_HOST"]
    ns = current_netns()
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


def open_end(kind: str, env: RankEnv, ctx: zmq.Context, hosts: bool = False):
    """The local end of transport `kind` (comm/registry.py) for this rank of a launched run, in the
    run's directories; with emulated `hosts`, "ipc" means ipc inside a host and tcp across."""
    places = Places(
        ipc_dir(env.master_port, env.generation),
        shm_dir_for(env.master_port, env.generation),
        env.master_addr,
        ctx,
    )
    entry = BY_NAME[kind]
    opener = entry.open_end_across_hosts if hosts else entry.open_end
    if opener is None:
        raise UsageError(
            f"transport {kind!r}: a launched rank cannot open it{' across hosts' if hosts else ''}"
        )
    if entry.pinnable:
        nudge_to_own_core(env.rank, env.world_size)
    return opener(env.rank, env.world_size, places)


def pick_endpoints(peers: Peers, rank: int) -> list[str]:
    """Where this rank sends to each peer: the peer's local endpoint (ipc) when it is on the same
    host and has one, else its endpoint (tcp when there are several hosts)."""
    me = peers.hosts[rank]
    return [
        local if local and host == me else far
        for far, local, host in zip(peers.endpoints, peers.local_endpoints, peers.hosts, strict=True)
    ]


def send_ctrl(sock: zmq.Socket, msg: dict) -> None:
    sock.send(json.dumps(msg, default=_jsonable).encode())


def _jsonable(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def recv_ctrl(sock: zmq.Socket, want: str | tuple[str, ...], timeout_s: float, rank: int) -> dict:
    """The next control message of type `want` (or of one of the types); an abort raises PeerLost
    (ScenarioMismatch when that was the reason), silence CommTimeout."""
    wanted = (want,) if isinstance(want, str) else want
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000) + 1):
            if time.monotonic() >= deadline:
                raise CommTimeout(rank, f"{' or '.join(wanted)} from the coordinator", None, None, timeout_s)
            continue
        raw = sock.recv()
        try:
            msg = json.loads(raw)
        except ValueError:
            raise WireError(
                f"rank {rank}: the coordinator sent something that is not JSON: {raw[:40]!r}", rank=rank
            ) from None
        if not isinstance(msg, dict):
            continue
        if msg.get("type") == "abort":
            if msg.get("error") == ScenarioMismatch.__name__:
                raise ScenarioMismatch(rank, msg.get("reason", "the ranks run different scenarios"))
            raise PeerLost(rank, msg.get("reason", "the run was aborted"), final=bool(msg.get("final")))
        if msg.get("type") in wanted:
            return msg


def join(
    ctrl: zmq.Socket,
    env: RankEnv,
    endpoint: str,
    timeout_s: float,
    scenario: dict | None = None,
    clock_ns=time.monotonic_ns,
    local_endpoint: str = "",
) -> tuple["Peers", clocks.ClockEstimate | None]:
    """Register with the coordinator and wait for the table, answering its clock probes meanwhile
    (every rank is probed: several hosts may share one host name, and one host may run ranks on
    skewed time sources); returns the table of every rank (endpoints, hosts) and this rank's clock
    offset to the coordinator's clock (None if the coordinator gave none)."""
    send_ctrl(
        ctrl,
        {
            "type": "register",
            "rank": env.rank,
            "host": host_identity(),
            "pid": os.getpid(),
            "endpoint": endpoint,
            "local_endpoint": local_endpoint,
            "t_us": clock_ns() / 1000.0,
            "scenario_hash": fingerprint(scenario) if scenario is not None else "",
            "scenario": scenario,
            "generation": env.generation,
        },
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msg = recv_ctrl(ctrl, ("table", "clock"), max(0.0, deadline - time.monotonic()), env.rank)
        except CommTimeout:
            raise CommTimeout(
                env.rank,
                "register",
                waited_s=timeout_s,
                what=f"the table of endpoints from the coordinator at {env.coordinator} (has every rank "
                f"started, with the same WORLD_SIZE? is rank 0 running, and did its coordinator start?)",
            ) from None
        if msg["type"] == "table":
            break
        send_ctrl(
            ctrl,
            {
                "type": "clock",
                "rank": env.rank,
                "seq": msg.get("seq"),
                "t_us": clock_ns() / 1000.0,
                "generation": env.generation,
            },
        )
    clock = msg.get("clock")
    return Peers.from_table(msg), clocks.ClockEstimate(**clock) if clock else None
