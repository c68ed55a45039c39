"""Garbage thrown at a real run: thousands of seeded malformed messages at the coordinator's port
and at a rank's data socket, while a small run is going, under another launcher (a shell loop) and
under our own. The run either completes with correct results (garbage at the coordinator is
ignored and counted) or fails with one clear error (a WireError on the rank that got garbage),
within a timeout, with no process left behind and no traceback from the launcher itself."""

import json
import random
import socket
import threading
import time

import fuzzing
import psutil
import pytest
import zmq
from test_external import Ranks, clean_env, ranks  # noqa: F401 - ranks is a fixture
from test_failures import finish, launch

LONG = ["--set", "params.sizes=[1KiB]", "--set", "params.iters=1500", "--set", "params.warmup=0"]
NUM_MESSAGES = 3000


def listening_ports(pid: int, timeout_s: float = 20.0, exclude: set[int] = frozenset()) -> set[int]:
    """The tcp ports process `pid` listens on, once it listens on one not in `exclude`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ports = {
                c.laddr.port
                for c in psutil.Process(pid).net_connections("tcp")
                if c.status == psutil.CONN_LISTEN
            }
        except psutil.Error:
            ports = set()
        if ports - exclude:
            return ports
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not listen within {timeout_s}s")


class Fuzzer(threading.Thread):
    """Sends NUM_MESSAGES seeded garbage messages at a port: control messages from several DEALERs
    (plus raw TCP junk that is not even ZeroMQ), or data-plane messages from a PUSH."""

    def __init__(self, port: int, kind: str, seed: int, num_ranks: int):
        super().__init__(daemon=True)
        self.port, self.kind, self.rng, self.num_ranks = port, kind, random.Random(seed), num_ranks
        self.sent = 0

    def run(self) -> None:
        ctx = zmq.Context()
        endpoint = f"tcp://127.0.0.1:{self.port}"
        if self.kind == "control":
            socks = [ctx.socket(zmq.DEALER) for _ in range(3)]
            make = fuzzing.control_message
        else:
            socks = [ctx.socket(zmq.PUSH)]
            make = fuzzing.data_message
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, 1000)
            s.connect(endpoint)
        try:
            for i in range(NUM_MESSAGES):
                if self.kind == "control" and i % 500 == 0:
                    self.junk_tcp()
                try:
                    self.rng.choice(socks).send_multipart(make(self.rng, self.num_ranks))
                    self.sent += 1
                except zmq.ZMQError:
                    return  # the peer is gone: the run has ended
        finally:
            for s in socks:
                s.close()
            ctx.term()

    def junk_tcp(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(self.rng.randbytes(200))
        except OSError:
            pass


def root_cause(err: str) -> str:
    return next((line for line in err.splitlines() if "root cause" in line), "")


@pytest.mark.timeout(120)
def test_garbage_at_the_coordinator_is_ignored_under_another_launcher(ranks, runs_dir):  # noqa: F811
    port = ranks.start_nodes(3, runs_dir, LONG)
    listening_ports(ranks.procs[0].pid)  # rank 0's coordinator is up
    fuzzer = Fuzzer(port, "control", seed=1, num_ranks=3)
    fuzzer.start()
    done = ranks.finish(timeout_s=90)
    fuzzer.join(10)
    assert [code for code, _, _ in done] == [0, 0, 0], done
    err0 = done[0][2]
    assert "coordinator: ignored a malformed control message" in err0 and "Traceback" not in err0, err0
    result = json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())
    assert result["ok"] and result["rows"][0]["wrong"] == 0
    assert fuzzer.sent > 0


@pytest.mark.timeout(120)
def test_garbage_at_a_ranks_data_socket_fails_the_run_with_a_wire_error(ranks, runs_dir):  # noqa: F811
    port = ranks.start_nodes(3, runs_dir, LONG)
    [data_port] = listening_ports(ranks.procs[1].pid)  # rank 1 listens only on its data socket
    fuzzer = Fuzzer(data_port, "data", seed=2, num_ranks=3)
    fuzzer.start()
    done = ranks.finish(timeout_s=90)
    fuzzer.join(10)
    assert [code for code, _, _ in done] == [1, 1, 1], done
    root = root_cause(done[0][2])
    assert "rank 1" in root and "WireError" in root and "malformed message on its data socket" in root, done[
        0
    ][2]
    assert "WireError" in done[1][2]  # rank 1 says it too
    assert json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())["ok"] is False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", ["coordinator", "rank"])
def test_garbage_under_our_own_launcher(runs_dir, target):
    proc = launch(["run", "ring", "--ranks", "3", "--transport", "tcp", "--out", str(runs_dir), *LONG])
    coordinator_port = min(listening_ports(proc.pid))
    if target == "coordinator":
        fuzzer = Fuzzer(coordinator_port, "control", seed=3, num_ranks=3)
    else:
        launcher = psutil.Process(proc.pid)
        ranks_forked = sorted(
            (c for c in launcher.children() if c.cmdline() == launcher.cmdline()), key=lambda c: c.pid
        )
        [data_port] = listening_ports(ranks_forked[1].pid)  # the ranks are forked in order
        fuzzer = Fuzzer(data_port, "data", seed=4, num_ranks=3)
    fuzzer.start()
    out, err, leftovers = finish(proc, timeout_s=90)
    fuzzer.join(10)
    assert not leftovers, leftovers
    assert "Traceback (most recent call last)" not in err.split("root cause")[0], err  # not the launcher's
    if target == "coordinator":
        assert proc.returncode == 0, out + err
        assert "coordinator: ignored" in err
    else:
        assert proc.returncode == 1, out + err
        assert "rank 1" in root_cause(err) and "WireError" in root_cause(err), err
