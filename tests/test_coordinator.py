"""The coordinator in this process, with ranks played by threads that run the real rendezvous
(`rendezvous.join`): it survives thousands of garbage control messages, hands every rank its clock
offset, and fails a run whose ranks resolved different scenarios, telling every rank why."""

import json
import random
import subprocess
import sys
import threading
import time

import fuzzing
import pytest
import zmq

from playground.comm.addresses import free_tcp_port
from playground.comm.control import control_identity
from playground.core.errors import PeerLost, ScenarioMismatch
from playground.launcher.worker import _error_message
from playground.rendezvous import join as rendezvous
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.join import RankEnv

SCENARIO = {"name": "ring", "ranks": 3, "params": {"iters": 3, "sizes": [1024]}}


class World:
    """A Coordinator serving on a thread, and `play(rank, scenario)` threads acting as ranks."""

    def __init__(self, n: int, tmp_path, generation: int = 0):
        self.n, self.port, self.generation = n, free_tcp_port(), generation
        self.ctx = zmq.Context()
        self.coordinator = Coordinator(n, 10.0, tmp_path, watch_exits=False, generation=generation)
        router = self.ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(f"tcp://127.0.0.1:{self.port}")
        self.server = threading.Thread(target=self.coordinator.serve, args=(router,), daemon=True)
        self.server.start()
        self.results: dict[int, object] = {}
        self.players: list[threading.Thread] = []
        self.sockets = [router]

    def socket(self, kind, identity: bytes | None = None) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(f"tcp://127.0.0.1:{self.port}")
        self.sockets.append(sock)
        return sock

    def play(self, rank: int, scenario: dict = SCENARIO) -> None:
        g = self.generation
        sock = self.socket(zmq.DEALER, control_identity(rank, g))

        def body():
            env = RankEnv(rank, self.n, "127.0.0.1", self.port, g)
            try:
                endpoints, clock = rendezvous.join(
                    sock, env, f"tcp://127.0.0.1:{9000 + rank}", 10.0, scenario
                )
                done = {"type": "done", "rank": rank, "result": {"rank": rank}, "generation": g}
                rendezvous.send_ctrl(sock, done)
                rendezvous.recv_ctrl(sock, "release", 10.0, rank)
                self.results[rank] = (endpoints, clock)
            except Exception as e:  # noqa: BLE001 - the test reads it
                self.results[rank] = e
                rendezvous.send_ctrl(sock, _error_message(rank, e, g))  # what a real rank reports

        t = threading.Thread(target=body, daemon=True)
        t.start()
        self.players.append(t)

    def finish(self):
        for t in [*self.players, self.server]:
            t.join(20)
        assert not self.server.is_alive(), "the coordinator did not finish"
        for s in self.sockets:
            s.close()
        self.ctx.term()
        return self.coordinator.outcome()


@pytest.mark.timeout(60)
def test_garbage_is_ignored_and_counted_while_a_run_completes(tmp_path, capfd):
    world = World(3, tmp_path)
    rng = random.Random(99)
    senders = [world.socket(zmq.DEALER) for _ in range(4)] + [world.socket(zmq.DEALER, b"rank-0x")]
    for _ in range(2000):
        rng.choice(senders).send_multipart(fuzzing.control_message(rng, 3))
    deadline = time.monotonic() + 20
    while world.coordinator.num_ignored < 2000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert world.coordinator.num_ignored == 2000  # every one of them ignored, none taken for a rank's
    for r in range(3):
        world.play(r)
    for _ in range(1000):  # more while the ranks register and take their clock probes
        rng.choice(senders).send_multipart(fuzzing.control_message(rng, 3))
    outcome = world.finish()
    assert outcome.ok, outcome.failures
    assert [res["rank"] for res in outcome.results] == [0, 1, 2]
    ignored = world.coordinator.num_ignored
    assert 2000 < ignored <= 3000
    err = capfd.readouterr().err
    assert err.count("coordinator: ignored a malformed control message") == 1
    assert f"coordinator: ignored {ignored} malformed control messages in all" in err
    for r in range(3):
        peers, clock = world.results[r]
        assert peers.endpoints == [f"tcp://127.0.0.1:{9000 + k}" for k in range(3)]
        # One process, one clock: the true offset is 0, so the estimate is within its bound of it.
        assert abs(clock.offset_us) <= clock.uncertainty_us and clock.samples > 0


@pytest.mark.timeout(60)
def test_a_late_word_of_the_group_before_a_restart_is_refused(tmp_path, capfd):
    """Generation 1's coordinator: the old group's error, done and progress (generation 0, from
    its old sockets) change nothing; the new group completes."""
    world = World(2, tmp_path, generation=1)
    old = world.socket(zmq.DEALER, control_identity(1))
    old.send(json.dumps({"type": "error", "rank": 1, "error_type": "PeerLost", "message": "late"}).encode())
    old.send(json.dumps({"type": "progress", "done": 99, "total": 100}).encode())
    deadline = time.monotonic() + 10
    while world.coordinator.num_stale < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    for r in range(2):
        world.play(r)
    outcome = world.finish()
    assert outcome.ok and not outcome.failures
    assert world.coordinator.num_stale == 2 and world.coordinator.progress_done == 0
    err = capfd.readouterr().err
    assert "refused a 'error' message of generation 0" in err and "this is generation 1" in err


@pytest.mark.timeout(60)
def test_ranks_with_another_scenario_fail_the_run_on_every_rank(tmp_path):
    world = World(3, tmp_path)
    other = {**SCENARIO, "params": {"iters": 4, "sizes": [1024]}}
    for r in range(3):
        world.play(r, other if r == 2 else SCENARIO)
    outcome = world.finish()
    assert not outcome.ok and len(outcome.failures) == 1  # one error, not one per rank
    root = outcome.root_cause
    assert root.rank == 2 and "ScenarioMismatch" in root.message
    assert "params.iters: rank 0 has 3, rank 2 has 4" in root.message
    for r in range(3):  # every rank, the differing one included, was told why
        assert isinstance(world.results[r], ScenarioMismatch), world.results[r]
        assert "rank 2 runs another scenario than rank 0" in str(world.results[r])


@pytest.mark.timeout(60)
def test_a_rank_outside_the_world_is_one_clear_failure(tmp_path):
    world = World(2, tmp_path)
    world.play(5)  # its WORLD_SIZE said more ranks
    time.sleep(0.3)
    world.play(0)  # ranks that register after the abort hear of it at once
    world.play(1)
    outcome = world.finish()
    assert not outcome.ok
    assert "sent register as rank 5, but the run has 2 ranks" in outcome.root_cause.message
    assert all(isinstance(world.results[r], PeerLost) for r in (0, 1))
    assert outcome.elapsed_s < 5


SLOW_DUMPER = """
import signal, sys, time
path = sys.argv[1]
def dump(signum, frame):  # a stack dump that takes a while to write, as a long one on a busy host
    with open(path, "a") as f:
        f.write("Current thread 0x1 (most recent call first):\\n")
        f.flush()
        time.sleep(0.03)  # longer than a poll: read in between, it is the first line only
        f.write('  File "x.py", line 1 in where_it_hangs\\n')
signal.signal(signal.SIGUSR1, dump)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(30)
def test_a_stack_dump_is_read_whole_not_from_its_first_line(tmp_path):
    """A hung rank writes its stack dump line by line: read while it writes, the dump must come whole."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_DUMPER, str(tmp_path / "rank-1.stack")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        coordinator = Coordinator(2, 10.0, tmp_path)  # watch_exits: its own child, so it may signal it
        coordinator.pids[1] = proc.pid
        assert "where_it_hangs" in coordinator.dump_stack(1)
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.timeout(30)
def test_a_report_still_in_flight_when_its_rank_is_seen_gone_is_read(tmp_path):
    """A rank reports its error and exits; the launcher may see its exit first. `await_report`
    reads the router before the exit is judged, so the root cause is the rank's own error."""
    ctx = zmq.Context()
    coordinator = Coordinator(1, 10.0, tmp_path, watch_exits=False)
    router = ctx.socket(zmq.ROUTER)
    port = free_tcp_port()
    router.bind(f"tcp://127.0.0.1:{port}")
    coordinator.router = router
    rank = ctx.socket(zmq.DEALER)
    rank.setsockopt(zmq.IDENTITY, control_identity(0))
    rank.connect(f"tcp://127.0.0.1:{port}")
    try:
        assert not coordinator.await_report(0, timeout_s=0.05)  # nothing sent: not reported
        rendezvous.send_ctrl(rank, _error_message(0, RuntimeError("boom in rank 0")))
        assert coordinator.await_report(0, timeout_s=10.0)
        assert "boom in rank 0" in coordinator.outcome().root_cause.message
    finally:
        for s in (rank, router):
            s.close(linger=0)
        ctx.term()


def _register(rank: int, generation: int) -> list[bytes]:
    msg = {
        "type": "register",
        "rank": rank,
        "endpoint": f"tcp://127.0.0.1:{9000 + rank}",
        "generation": generation,
    }
    return [control_identity(rank, generation), json.dumps(msg).encode()]


def test_a_live_group_keeps_the_next_generations_registrations_for_its_coordinator(tmp_path):
    """A live recovery: survivors register with generation 1 while generation 0's coordinator
    still serves; it keeps them (`early`) and generation 1's takes them first (`backlog`)."""
    old = Coordinator(2, 10.0, tmp_path, generation=0, live=True)
    old.handle(_register(0, 1))
    assert len(old.early) == 1 and not old.endpoints
    new = Coordinator(2, 10.0, tmp_path, generation=1, live=True, backlog=old.early)
    for parts in new.backlog:
        new.handle(parts)
    assert new.endpoints == {0: "tcp://127.0.0.1:9000"}


def test_a_refused_live_recovery_tells_a_survivor_already_re_forming_at_once(tmp_path):
    """The launcher stops the group after all: a survivor that registered for generation 1 is sent
    the abort marked final, so its rendezvous raises PeerLost(final=True) rather than wait."""
    coordinator = Coordinator(2, 10.0, tmp_path, generation=0, live=True)
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        port = free_tcp_port()
        router.bind(f"tcp://127.0.0.1:{port}")
        dealer.setsockopt(zmq.IDENTITY, control_identity(0, 1))
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send(_register(0, 1)[1])
        assert router.poll(5000)
        coordinator.router = router
        coordinator.drain(router)
        coordinator.abort_message = {"type": "abort", "reason": "rank 1 failed: killed by SIGKILL"}
        coordinator.refuse_live()
        with pytest.raises(PeerLost, match="rank 1 failed") as lost:
            rendezvous.recv_ctrl(dealer, "table", 5.0, 0)
        assert lost.value.final
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()
