"""The launchers users have, started for real by the tests: emulated hosts (two network namespaces
on a veth pair) and a Slurm cluster (munged, slurmctld, slurmd started by hand, no systemd).

A test whose tool is missing skips or fails as `tools.need` says. Every daemon,
namespace and link made here is removed at the end of the session, and a session that was killed
before it could clean up has its namespaces swept by the next one (their names carry its pid).
"""

import os
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from tools import have

from playground.comm.addresses import free_tcp_port

COMMAND_TIMEOUT_S = 15.0  # every `ip` and Slurm client call
IDLE_WAIT_S = 40.0  # slurmd registering with slurmctld, nodes idle
STOP_WAIT_S = 5.0


def run(args: list[str], timeout_s: float = COMMAND_TIMEOUT_S, **kw) -> subprocess.CompletedProcess:
    """A short command that must succeed: its stderr in the error when it does not."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=True, **kw)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(
            f"`{' '.join(args)}` failed ({e.returncode}): {(e.stderr or e.stdout).strip()}"
        ) from None


# -- emulated hosts ------------------------------------------------------------------------------
_OURS = re.compile(r"^pgl(\d+)-h\d$")


class HostPair:
    """Two hosts: network namespaces `pgl<pid>-h1` (10.78.0.1) and `-h2` (10.78.0.2), joined by one
    veth pair made directly inside them (nothing in the machine's own namespace)."""

    addrs = ("10.78.0.1", "10.78.0.2")

    def __init__(self):
        self.names = (f"pgl{os.getpid()}-h1", f"pgl{os.getpid()}-h2")

    def create(self) -> "HostPair":
        sweep_stale_namespaces()
        a, b = self.names
        try:
            for name in self.names:
                run(["ip", "netns", "add", name])
            run(["ip", "link", "add", "eth0", "netns", a, "type", "veth", "peer", "name", "eth0", "netns", b])
            for name, addr in zip(self.names, self.addrs, strict=True):
                run(["ip", "-n", name, "addr", "add", f"{addr}/24", "dev", "eth0"])
                run(["ip", "-n", name, "link", "set", "lo", "up"])
                run(["ip", "-n", name, "link", "set", "eth0", "up"])
        except BaseException:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT_S)

    def enter(self, i: int) -> list[str]:
        """A command prefix that runs in host i's network namespace (and keeps /sys/fs/cgroup)."""
        return ["nsenter", f"--net=/var/run/netns/{self.names[i]}"]


def sweep_stale_namespaces() -> None:
    """Delete the namespaces of earlier test sessions that died before they could."""
    listing = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    for line in listing.stdout.splitlines():
        m = _OURS.match(line.split()[0]) if line.strip() else None
        if m and not psutil.pid_exists(int(m.group(1))):
            subprocess.run(
                ["ip", "netns", "del", line.split()[0]], capture_output=True, timeout=COMMAND_TIMEOUT_S
            )


def can_emulate_hosts() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "emulated hosts need root (network namespaces)"
    if not have("ip", "nsenter"):
        return False, "emulated hosts need `ip` (iproute2) and `nsenter` (util-linux)"
    return True, ""


# -- Slurm -----------------------------------------------------------------------------------------
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    addr: str
    enter: tuple[str, ...] = ()  # command prefix that puts the node in its host's namespace


class SlurmCluster:
    """A Slurm cluster of `nodes` in `root`: one munged, one slurmctld (on the first node's host),
    one slurmd per node. A node in a namespace also gets its own host name (a UTS namespace), which
    is how slurmd knows which node it is; nodes on this machine share it and are told with -N."""

    def __init__(self, root: Path, nodes: list[SlurmNode], controller: str = "localhost"):
        self.root, self.nodes, self.controller = root, nodes, controller
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen] = []

    def start(self) -> "SlurmCluster":
        try:
            self._write_config()
            self._start_munged()
            self._spawn(
                "slurmctld", [*self.nodes[0].enter, *self._named(self.nodes[0]), "slurmctld", "-D", "-i"]
            )
            for node in self.nodes:
                (self.root / "spool" / node.name).mkdir(parents=True, exist_ok=True)
                self._spawn(
                    f"slurmd-{node.name}", [*node.enter, *self._named(node), "slurmd", "-D", "-N", node.name]
                )
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _named(self, node: SlurmNode) -> list[str]:
        """In a namespace: also a UTS namespace whose host name is the node's."""
        if not node.enter:
            return []
        return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', node.name]

    def _write_config(self) -> None:
        r = self.root
        for d in ("state", "spool", "log", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        r.chmod(0o755)  # munged wants its socket's directories searchable by all
        (r / "munge").chmod(0o755)
        nodes = "\n".join(
            f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={n.name if n.enter else 'localhost'} "
            f"CPUs=4 State=UNKNOWN"
            for n in self.nodes
        )
        self.conf.write_text(
            f"""ClusterName=playground
SlurmctldHost={self.controller}
SlurmctldPort={free_tcp_port()}
SlurmdPort={free_tcp_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.sock
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# 4 CPUs a node whatever the machine has, so that srun -n 4 fits on one node
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
{nodes}
PartitionName=pg Nodes={",".join(n.name for n in self.nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        )

    def _start_munged(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(128))
        key.chmod(0o600)
        m = self.root / "munge"
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                f"--key-file={key}",
                f"--socket={m}/munge.sock",
                f"--pid-file={m}/munged.pid",
                f"--seed-file={m}/munged.seed",
                f"--log-file={self.root}/log/munged.log",
            ],
        )
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while not (m / "munge.sock").exists():
            if time.monotonic() > deadline or self.daemons[-1].poll() is not None:
                raise RuntimeError(f"munged did not start: {self._log('munged')}")
            time.sleep(0.05)

    def _spawn(self, name: str, args: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.out", "w")  # noqa: SIM115 - the daemon writes it
        self.daemons.append(
            subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        )
        out.close()

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + IDLE_WAIT_S
        states = ""
        while time.monotonic() < deadline:
            dead = [d.args for d in self.daemons if d.poll() is not None]
            if dead:
                raise RuntimeError(f"a Slurm daemon exited: {dead[0]}\n{self._logs()}")
            got = subprocess.run(
                [*self.nodes[0].enter, "sinfo", "-h", "-N", "-o", "%N %T"],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=COMMAND_TIMEOUT_S,
            )
            states = got.stdout.strip()
            if (
                got.returncode == 0
                and states
                and all(line.split()[1] == "idle" for line in states.splitlines())
            ):
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm nodes not idle after {IDLE_WAIT_S:.0f}s ({states!r})\n{self._logs()}")

    def srun_prefix(self) -> list[str]:
        """Where srun runs: the controller's host (the first node's namespace, if it has one)."""
        return [*self.nodes[0].enter, "srun"]

    def _log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return "\n".join(path.read_text().splitlines()[-15:]) if path.exists() else ""

    def _logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-10:])
            for p in sorted((self.root / "log").iterdir())
        )

    def stop(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL) and any job step of this cluster still running."""
        for d in reversed(self.daemons):
            _signal_group(d, signal.SIGTERM)
        for d in self.daemons:
            try:
                d.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                _signal_group(d, signal.SIGKILL)
                d.wait(STOP_WAIT_S)
        for p in psutil.process_iter(["name"]):
            try:
                if (p.info["name"] or "").startswith("slurm") and p.environ().get("SLURM_CONF") == str(
                    self.conf
                ):
                    for q in [*p.children(recursive=True), p]:
                        q.kill()
            except psutil.Error:
                pass
        self.daemons.clear()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the daemon and what it forked in its session (slurmscriptd)
    except ProcessLookupError:
        pass
