"""Where a run's ranks and control plane can be reached: ports, addresses, ipc and /dev/shm paths.

Small pure helpers shared by the transports (which bind and connect), the rendezvous and the
baselines' launchers. Every directory a run makes is named by its coordinator's port, so two runs
on one host never share one, and a run that died can be swept by it (playground/core/scratch.py).
"""

import os
import socket
import tempfile


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


def ipc_dir(master_port: int, generation: int = 0) -> str:
    """The run's directory of ipc:// sockets (PLAYGROUND_IPC_DIR overrides it: emulated hosts put
    it where every namespace sees it); a restarted group's (`generation` > 0) has its own beside it."""
    base = os.environ.get("PLAYGROUND_IPC_DIR") or os.path.join(
        tempfile.gettempdir(), f"playground-{master_port}"
    )
    return base + generation_suffix(generation)


def shm_dir_for(master_port: int, generation: int = 0) -> str:
    """The run's directory in /dev/shm: shared-memory rings and mailboxes (a generation's own, as above)."""
    return os.path.join("/dev/shm", f"playground-{master_port}{generation_suffix(generation)}")


def generation_suffix(generation: int) -> str:
    """ "" for the first group of a run, "-g<n>" for its n-th restart: no file of one group's data
    plane can be taken for another's."""
    return f"-g{generation}" if generation else ""
