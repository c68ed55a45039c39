"""The namespace harness: a run's emulated cluster as Linux network namespaces, and nothing else.

    pg<pid>-br    the switch: bridge br0 (10.77.0.254, where the coordinator listens) and one
                  port h<k> per host
    pg<pid>-h<k>  host k: lo, and eth0 (10.77.0.<k+1>/24), the other end of the veth pair h<k>

Each veth pair is created with one end in each namespace, so nothing is ever made in the machine's
own namespace: deleting a run's namespaces deletes every link and qdisc it had. tbf shapes both
directions of each host link: eth0's egress in the host is its upload, h<k>'s egress in the bridge
namespace its download (topology.tbf_args says how it is sized, and why).

Names carry the launcher's pid. `sweep_stale()`, run by every launch, deletes the namespaces of
launchers that are gone (SIGKILLed, so their `finally` never ran), as `scratch.sweep_stale` does for
files. `ip` and `tc` run as subprocesses with a timeout; a failure is one EmulationError naming the
command and what it printed.

A network namespace belongs to a thread, not a process. `enter(name)` moves the calling thread
(setns(2) through ctypes: Python 3.11 has no os.setns); threads it creates afterwards, such as
ZeroMQ's I/O threads, are born inside.
"""

import ctypes
import os
import re
import shutil
import subprocess
from contextlib import contextmanager

from playground.core import interrupts
from playground.core.errors import EmulationError
from playground.core.machine import NETNS_DIR, current_netns
from playground.core.scratch import pid_alive
from playground.core.topology import BRIDGE_ADDR, SUBNET, Link, host_addr, tbf_args

COMMAND_TIMEOUT_S = 10.0
_CLONE_NEWNET = 0x40000000
_OURS = re.compile(r"^pg(\d+)-(br|h\d+)$")
_libc = ctypes.CDLL(None, use_errno=True)


def euid() -> int:
    """The effective uid (a function so a test can pretend not to be root)."""
    return os.geteuid()


def check_can_emulate() -> None:
    """EmulationError unless this process can build namespaces: root, with `ip` and `tc`."""
    if euid() != 0:
        raise EmulationError(
            "--hosts needs root (it creates network namespaces, veth links and tc qdiscs); "
            "run as root, or without --hosts"
        )
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise EmulationError(
            f"--hosts needs {' and '.join(missing)} from iproute2 (apt-get install iproute2)"
        )


def run(*args: str) -> None:
    """Run one `ip`/`tc` command; EmulationError with its stderr if it fails or hangs. It runs in a
    session of its own, with Ctrl-C held back until it is there: Ctrl-C at the terminal is the
    launcher's to handle, not a half-made link's (CI saw `ip` killed by it before its `setsid`)."""
    try:
        with interrupts.held():
            subprocess.run(
                args,
                check=True,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                start_new_session=True,
            )
    except subprocess.CalledProcessError as e:
        said = (e.stderr or e.stdout or "").strip().splitlines()
        raise EmulationError(
            f"`{' '.join(args)}` failed (status {e.returncode}): {said[-1] if said else 'no output'}"
        ) from None
    except subprocess.TimeoutExpired:
        raise EmulationError(f"`{' '.join(args)}` did not finish within {COMMAND_TIMEOUT_S:.0f}s") from None
    except FileNotFoundError:
        raise EmulationError(f"`{args[0]}` is not installed (apt-get install iproute2)") from None


class Cluster:
    """K host namespaces joined to a bridge namespace, owned by the launcher `owner_pid`.

    `create()` builds everything or, failing, removes what it made and raises; `destroy()` removes
    everything and may be called any number of times. `link_down(host)` cuts one host off (both
    ends of its veth), as a pulled cable would."""

    def __init__(self, num_hosts: int, link: Link | None = None, owner_pid: int | None = None):
        pid = os.getpid() if owner_pid is None else owner_pid
        self.num_hosts, self.link = num_hosts, link or Link()
        self.bridge_ns = f"pg{pid}-br"
        self.host_ns = [f"pg{pid}-h{k}" for k in range(num_hosts)]
        self.made: list[str] = []  # namespaces that exist because of us
        self.cut: set[int] = set()  # hosts whose link is down

    def __repr__(self):
        return f"Cluster({self.num_hosts} hosts, {self.link.describe()}, {self.bridge_ns})"

    def create(self) -> "Cluster":
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        return self

    def _create(self) -> None:
        br = self.bridge_ns
        for ns in (br, *self.host_ns):
            if os.path.exists(os.path.join(NETNS_DIR, ns)):  # this process's own earlier run left it
                run("ip", "netns", "del", ns)
            self.made.append(ns)  # before: a failed `add` may still have made it
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", br, "addr", "add", f"{BRIDGE_ADDR}/24", "dev", "br0")
        run("ip", "-n", br, "link", "set", "br0", "up")
        for k, ns in enumerate(self.host_ns):
            port = f"h{k}"
            run("ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            run("ip", "-n", br, "link", "set", port, "master", "br0")
            run("ip", "-n", ns, "addr", "add", f"{host_addr(k)}/24", "dev", "eth0")
            if self.link.rate:
                for where, dev in ((ns, "eth0"), (br, port)):
                    run("tc", "-n", where, "qdisc", "add", "dev", dev, "root", *tbf_args(self.link.rate))
            run("ip", "-n", br, "link", "set", port, "up")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    def link_down(self, host: int) -> None:
        run("ip", "-n", self.host_ns[host], "link", "set", "eth0", "down")
        run("ip", "-n", self.bridge_ns, "link", "set", f"h{host}", "down")
        self.cut.add(host)

    def restore_links(self) -> list[int]:
        """Every cut link up again (a restarted group runs on a repaired cluster); the hosts mended."""
        mended = sorted(self.cut)
        for host in mended:
            run("ip", "-n", self.bridge_ns, "link", "set", f"h{host}", "up")
            run("ip", "-n", self.host_ns[host], "link", "set", "eth0", "up")
        self.cut.clear()
        return mended

    def destroy(self) -> list[str]:
        """Delete our namespaces (their links and qdiscs go with them); returns what failed."""
        errors = []
        for ns in reversed(self.made):
            try:
                run("ip", "netns", "del", ns)
            except EmulationError as e:
                if os.path.exists(os.path.join(NETNS_DIR, ns)):
                    errors.append(str(e))
        self.made.clear()
        return errors

    def rank_env(self, host: int) -> dict:
        """What a rank on `host` gets in its environment: who its host is, which namespace to enter,
        and where the coordinator listens."""
        return {
            "PLAYGROUND_HOST": f"h{host}",
            "PLAYGROUND_NETNS": self.host_ns[host],
            "MASTER_ADDR": BRIDGE_ADDR,
        }


def sweep_stale() -> list[str]:
    """Delete namespaces left by launchers that no longer run; returns their names. Does nothing
    unless root (only root made them, and only root can remove them)."""
    if euid() != 0:
        return []
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        m = _OURS.match(name)
        if m and not pid_alive(int(m.group(1))):
            try:
                run("ip", "netns", "del", name)
                removed.append(name)
            except EmulationError:
                pass  # another launcher swept it first
    return removed


def run_namespaces(owner_pid: int) -> list[str]:
    """The namespaces that launcher `owner_pid` made and that still exist (what tests check)."""
    try:
        return sorted(
            n for n in os.listdir(NETNS_DIR) if (m := _OURS.match(n)) and int(m.group(1)) == owner_pid
        )
    except OSError:
        return []


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter(name: str) -> None:
    """Move the calling thread into network namespace `name` for good."""
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(fd)
    finally:
        os.close(fd)


@contextmanager
def entered(name: str):
    """The calling thread inside namespace `name` for the `with` body, then back where it was."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter(name)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


__all__ = ["Cluster", "SUBNET", "check_can_emulate", "enter", "entered", "sweep_stale", "current_netns"]
