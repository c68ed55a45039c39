"""The namespace harness: a cluster is built and removed whole, shaped on both ends of each link,
reachable from its bridge, cut on demand, and swept when its launcher died without cleaning up."""

import os
import socket
import subprocess
import sys

import pytest

from playground.core.errors import EmulationError
from playground.core.machine import current_netns
from playground.core.topology import BRIDGE_ADDR, Link, host_addr
from playground.hosts import netns

pytestmark = pytest.mark.timeout(60)


def _tc(ns: str, dev: str) -> str:
    return subprocess.run(
        ["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True
    ).stdout


def _can_connect(from_ns: str, addr: str, port: int) -> bool:
    with netns.entered(from_ns), socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((addr, port)) == 0


def test_check_can_emulate_says_root_in_one_line(monkeypatch):
    monkeypatch.setattr(netns, "euid", lambda: 1000)
    with pytest.raises(EmulationError, match=r"^--hosts needs root \(it creates network namespaces") as e:
        netns.check_can_emulate()
    assert "\n" not in str(e.value)
    assert netns.sweep_stale() == []  # not root: nothing to sweep, nothing tried


def test_a_failing_command_is_one_error_naming_it(as_root):
    with pytest.raises(EmulationError, match=r"^`ip netns del pg-no-such` failed \(status 1\): "):
        netns.run("ip", "netns", "del", "pg-no-such")


def test_cluster_is_built_shaped_reachable_and_removed_whole(as_root):
    cluster = netns.Cluster(2, Link(rate=10**9))
    try:
        cluster.create()
        assert netns.run_namespaces(os.getpid()) == sorted([cluster.bridge_ns, *cluster.host_ns])
        assert "tbf" in _tc(cluster.host_ns[1], "eth0") and "rate 1Gbit" in _tc(cluster.bridge_ns, "h1")
        with netns.entered(cluster.bridge_ns):
            assert current_netns() == cluster.bridge_ns
            server = socket.create_server((BRIDGE_ADDR, 0))
        assert current_netns() == ""  # back in the thread's own namespace
        port = server.getsockname()[1]
        with server:
            assert _can_connect(cluster.host_ns[0], BRIDGE_ADDR, port)
            with netns.entered(cluster.host_ns[1]):
                peer = socket.create_server((host_addr(1), 0))
            with peer:
                assert _can_connect(cluster.host_ns[0], host_addr(1), peer.getsockname()[1])
                cluster.link_down(1)
                assert not _can_connect(cluster.host_ns[0], host_addr(1), peer.getsockname()[1])
            assert _can_connect(cluster.host_ns[0], BRIDGE_ADDR, port)  # only host 1 was cut off
    finally:
        assert cluster.destroy() == []
    assert netns.run_namespaces(os.getpid()) == []
    assert cluster.destroy() == []  # again: nothing left, nothing to fail


def test_a_cluster_that_cannot_be_finished_removes_what_it_made(as_root, monkeypatch):
    cluster = netns.Cluster(2, Link(rate=10**9))
    real_run = netns.run

    def failing_tc(*args):
        if args[0] == "tc":
            raise EmulationError("`tc ...` failed (status 2): no such qdisc")
        real_run(*args)

    monkeypatch.setattr(netns, "run", failing_tc)
    with pytest.raises(EmulationError, match="no such qdisc"):
        cluster.create()
    assert netns.run_namespaces(os.getpid()) == []


def test_sweep_removes_only_namespaces_of_dead_launchers(as_root):
    # the owner runs while its namespaces are made (any launcher starting beside this test sweeps
    # the namespaces of dead owners), then ends
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = netns.Cluster(1, owner_pid=owner.pid).create()
    finally:
        owner.kill()
        owner.wait()
    alive = netns.Cluster(1).create()  # ours: this process runs
    try:
        removed = netns.sweep_stale()
        # gone, by this sweep or by a launcher's beside it
        assert netns.run_namespaces(owner.pid) == [], removed
        assert netns.run_namespaces(os.getpid()) == sorted([alive.bridge_ns, *alive.host_ns])
    finally:
        dead.destroy()
        alive.destroy()


def test_a_host_is_its_namespace_or_playground_host_never_the_host_name_alone(as_root, monkeypatch):
    from playground.rendezvous.join import host_identity

    monkeypatch.delenv("PLAYGROUND_HOST", raising=False)
    assert host_identity() == socket.gethostname()
    cluster = netns.Cluster(2).create()
    try:
        with netns.entered(cluster.host_ns[0]):
            h0 = host_identity()
        with netns.entered(cluster.host_ns[1]):
            h1 = host_identity()
        assert h0 == f"{socket.gethostname()}/{cluster.host_ns[0]}" and h0 != h1
        assert host_identity({"PLAYGROUND_HOST": "h7"}) == "h7"
    finally:
        cluster.destroy()
