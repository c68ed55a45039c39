"""The communicator's C path (native/comm_core.c): the common case of isend, recv_reduce and
isend_computed in one C call, everything else handed to the Python methods. It must be invisible:
the same results, the same byte counts, the same virtual times as the Python path alone (`fast =
False`), the same errors (tests/test_sim.py checks that it is the path a simulated message takes)."""

import numpy as np
import pytest

from playground.collectives import ReduceOp, run_collective
from playground.collectives.check import expected_result, pattern
from playground.comm.communicator import Communicator
from playground.comm.requests import DONE, SendRequest
from playground.comm.world import open_world, run_local
from playground.core.errors import InvalidPeer
from playground.models.costs import PRESETS
from playground.sim.driver import simulate
from playground.sim.network import Machine

pytestmark = pytest.mark.timeout(60)
LINK = PRESETS["ib"]


def python_path(monkeypatch) -> None:
    """Every Communicator made from now on (until `monkeypatch` undoes it) takes the Python path."""
    init = Communicator.__init__

    def slow_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.fast = False

    monkeypatch.setattr(Communicator, "__init__", slow_init)


def _allreduce_everywhere(kind, tmp_path, n, algorithm, count):
    def body(comm):
        x = pattern(comm.rank, count, "float32")
        out = run_collective(comm, "allreduce", x, ReduceOp.SUM, algorithm, 64)
        return out, comm.bytes_sent, comm.bytes_received, comm.fast

    return run_local(n, body, timeout_s=20, transport=kind, directory=str(tmp_path))


@pytest.mark.parametrize("kind", ["local", "ipc", "shm"])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
def test_the_c_path_and_the_python_path_agree(kind, algorithm, tmp_path, monkeypatch):
    n, count = 5, 103  # uneven chunks, several 64-byte segments
    fast = _allreduce_everywhere(kind, tmp_path / "fast", n, algorithm, count)
    python_path(monkeypatch)
    slow = _allreduce_everywhere(kind, tmp_path / "slow", n, algorithm, count)
    want = expected_result(n, count, "float32", ReduceOp.SUM)
    assert [r[3] for r in fast] == [True] * n and [r[3] for r in slow] == [False] * n
    for (out_f, sent_f, recv_f, _), (out_s, sent_s, recv_s, _) in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(out_f, want)
        np.testing.assert_array_equal(out_s, want)
        assert (sent_f, recv_f) == (sent_s, recv_s) and sent_f > 0


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("data", [True, False])
def test_simulated_times_do_not_depend_on_the_path(algorithm, data, monkeypatch):
    """The C path lands a simulated message at the same virtual instant and charges its reduction
    the same time as the Python path: every rank's time is equal to the last bit."""
    n, size = 12, 4096

    def run():
        row, world = simulate(Machine(n, 1, LINK, LINK), "allreduce", algorithm, size, data=data)
        return row, [world.time_of(r) for r in range(n)], world.num_messages

    fast = run()
    python_path(monkeypatch)
    slow = run()
    assert fast[1] == slow[1] and fast[2] == slow[2]
    assert fast[0]["time_us"] == slow[0]["time_us"]
    if data:
        assert fast[0]["wrong"] == slow[0]["wrong"] == 0


def _pair(kind, tmp_path):
    return [Communicator(r, 2, t, timeout_s=5.0) for r, t in enumerate(open_world(kind, 2, str(tmp_path)))]


@pytest.mark.parametrize("kind", ["local", "shm"])
def test_a_message_parked_by_the_c_path_is_the_next_one_taken(kind, tmp_path):
    """rank 1 sends tags 5 then 6; rank 0 asks for 6 first: the C path finds 5, parks it, and the
    Python path waits for 6; then 5 comes from the parked messages. Keywords take the C path too."""
    a, b = _pair(kind, tmp_path)
    try:
        b.send(np.full(4, 5.0, np.float32), 0, 5)
        b.send(np.full(4, 6.0, np.float32), 0, 6)
        six, five = np.ones(4, np.float32), np.ones(4, np.float32)
        assert a.recv_reduce(1, 6, six, ufunc=np.add) == 4
        assert a.recv_reduce(1, 5, five, base=np.full(4, 2.0, np.float32), ufunc=np.multiply) == 4
        np.testing.assert_array_equal(six, np.full(4, 7.0))
        np.testing.assert_array_equal(five, np.full(4, 10.0))
        assert (a.bytes_received, b.bytes_sent) == (32, 32)
        with pytest.raises(TypeError):
            a.recv_reduce(1, 5, five, op=np.add)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", ["local", "shm"])
def test_bad_peers_and_requests_through_the_c_path(kind, tmp_path):
    a, b = _pair(kind, tmp_path)
    try:
        with pytest.raises(InvalidPeer, match="destination"):
            a.isend(np.zeros(2), 2, 0)
        with pytest.raises(InvalidPeer, match="source"):
            a.recv_reduce(-1, 0, np.zeros(2))
        with pytest.raises(InvalidPeer, match="destination"):
            a.isend_computed(7, 0, 2, np.dtype("f8"), lambda out: None)
        big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: a pending send on ZeroMQ/shm rings
        req = a.isend(big, 1, 3)
        assert req is DONE or isinstance(req, SendRequest)
        got = b.recv(0, 3)
        np.testing.assert_array_equal(got, big)
        assert req.wait(5.0) is None and req.test()
    finally:
        a.close()
        b.close()


def test_the_c_path_steps_aside_while_messages_are_traced(tmp_path):
    """A traced run records every send and receive: the same calls then take the Python path."""
    from playground.tracing.trace import Tracer

    transports = open_world("local", 2, str(tmp_path))
    tracers = [Tracer(r, None) for r in range(2)]
    a, b = (Communicator(r, 2, t, tracer=tracers[r]) for r, t in enumerate(transports))
    b.send(np.ones(3), 0, 1)
    a.recv_reduce(1, 1, np.zeros(3), np.add)
    assert [e[2] for e in tracers[1]._events] == ["send"]
    assert "recv_wait" in [e[2] for e in tracers[0]._events]


def _one_message(a, b, x) -> tuple[list[str], list[str]]:
    """b sends x to a, a reduces it; the names of the events each tracer recorded."""
    b.send(x, 0, 1)
    a.recv_reduce(1, 1, np.zeros(x.shape, x.dtype), np.add)
    return [e[2] for e in a.tracer._events], [e[2] for e in b.tracer._events]


def test_a_tracer_switched_on_after_the_communicator_is_made_is_honoured(tmp_path):
    """Nodes set `tracer.messages` after the tracer is made; the C path reads the slot per call."""
    from playground.tracing.trace import Tracer

    transports = open_world("local", 2, str(tmp_path))
    a, b = (Communicator(r, 2, t, tracer=Tracer(r, None, messages=False)) for r, t in enumerate(transports))
    try:
        assert _one_message(a, b, np.ones(3)) == ([], [])
        a.tracer.messages = b.tracer.messages = True
        got_a, got_b = _one_message(a, b, np.ones(3))
        assert got_b == ["send"] and "recv_wait" in got_a
    finally:
        a.close()
        b.close()


def test_a_tracer_class_changed_at_run_time_is_read_afresh(tmp_path):
    """The C path caches where `messages` lives in a Tracer; a class whose attribute changes (here
    a property that always says True) must be read through the new descriptor at once."""
    from playground.tracing.trace import Tracer

    transports = open_world("local", 2, str(tmp_path))
    a, b = (Communicator(r, 2, t, tracer=Tracer(r, None, messages=False)) for r, t in enumerate(transports))
    slot = Tracer.__dict__["messages"]
    try:
        assert _one_message(a, b, np.ones(3)) == ([], [])  # the cache now knows the slot
        Tracer.messages = property(lambda self: True)
        got_a, got_b = _one_message(a, b, np.ones(3))
        assert got_b == ["send"] and "recv_wait" in got_a
    finally:
        Tracer.messages = slot
        a.close()
        b.close()
    assert Tracer(0, None, messages=False).messages is False


class _Counted(np.ndarray):
    """An array that reports a size of its own: a subclass must not be read as a plain ndarray."""

    @property
    def nbytes(self) -> int:
        return 1000


@pytest.mark.parametrize("fast", [True, False])
def test_an_ndarray_subclass_is_counted_as_it_says(fast, tmp_path):
    transports = open_world("local", 2, str(tmp_path))
    a, b = (Communicator(r, 2, t) for r, t in enumerate(transports))
    a.fast = b.fast = fast
    try:
        plain = np.ones(3, np.float32)
        b.send(plain, 0, 1)
        b.send(plain.view(_Counted), 0, 1)
        for _ in range(2):
            a.recv_reduce(1, 1, np.zeros(3, np.float32), np.add)
        assert b.bytes_sent == 12 + 1000
    finally:
        a.close()
        b.close()
