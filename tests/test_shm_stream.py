"""Streams over shared memory (comm/shm_stream.py, native/stream.c): a large sendrecv_reduce passes
cell by cell through a small window and is reduced as it comes. Checked: the window's geometry; the
C loop alone (every op and dtype equal to numpy, a base, a drain, the in-place rule, bad arguments);
the exchange between two ranks over a grid of counts, ops and dtypes with cells of a few bytes;
every way the two sides can disagree on the path (one side parked the other's announcement, a
full mailbox, a plain recv on the other side, counts that differ); a dead sender and a silent peer;
and recursive doubling over shm at 2-8 ranks, in place and not, against the closed form."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from playground.collectives import ReduceOp, allreduce
from playground.collectives.check import expected_result, pattern
from playground.comm import shm_stream, wire
from playground.comm.communicator import Communicator
from playground.comm.shm_stream import HEADER_BYTES, StreamMessage, Streams, geometry
from playground.comm.world import open_world, run_local
from playground.core.errors import CommTimeout, PeerLost

pytestmark = pytest.mark.timeout(60)

OPS = [(np.add, 1), (np.multiply, 2), (np.maximum, 3), (np.minimum, 4)]
DTYPES = [(np.float32, 0), (np.float64, 1), (np.int32, 2), (np.int64, 3)]


@pytest.fixture
def small_cells(monkeypatch):
    """Cells of 64 bytes (the smallest) and every array through the rings: a few elements already
    take several cells and wrap the window."""
    monkeypatch.setenv("PLAYGROUND_SHM_CELL_BYTES", "64")
    monkeypatch.setenv("PLAYGROUND_SHM_MIN_BYTES", "0")


def _world(tmp_path, n=2):
    return open_world("shm", n, str(tmp_path))


def _producing(transport, dst, window, x):
    """A thread producing `x` into `window` (to rank `dst`); its result in `.done` once joined."""
    t = threading.Thread(
        target=lambda: setattr(
            t, "done", transport.mailboxes.stream(dst, window, x, None, None, 0, None, 10_000, 0, 0)
        )
    )
    t.start()
    return t


def _taken(a, b, window, x, target, code, base=None) -> None:
    """Rank 0 (`a`) produces `x` into `window` on a thread while rank 1 (`b`) takes it into `target`
    with `code` (native/reduce.c's op * 8 + dtype; 0 copies, no target drains); both finish."""
    t = _producing(a, 1, window, x)
    assert b.mailboxes.stream(0, None, None, window, target, code, base, 10_000, 0, 0) is True
    t.join(10)
    assert t.done is True


def _window(transport, dst, nbytes, cell_bytes, pid=None):
    """A window in `transport`'s ring to `dst`, its header written as an exchange writes it."""
    cell, slots = geometry(nbytes, cell_bytes)
    window, descriptor = transport.channels.try_alloc(dst, HEADER_BYTES + slots * cell)
    window[:HEADER_BYTES] = 0
    shm_stream._GEOMETRY.pack_into(window, 128, pid or os.getpid(), slots, cell, nbytes)
    return window, descriptor


# -- the window ------------------------------------------------------------------------------------


def test_geometry_cells_and_slots():
    assert geometry(16 << 20, 64 << 10) == (64 << 10, 4)  # 256 cells, a window of 4
    assert geometry(100_000, 64 << 10) == (64 << 10, 2)  # two cells, the last one short
    assert geometry(8, 64 << 10) == (64, 1)  # at least a cache line
    assert geometry(0, 64 << 10) == (64, 1)
    assert geometry(1000, 64) == (64, 4)


# -- the C loop alone ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, dcode", DTYPES)
@pytest.mark.parametrize("ufunc, op", OPS)
def test_a_stream_reduces_every_cell_as_numpy_does(tmp_path, ufunc, op, dtype, dcode):
    """Rank 0 writes 1000 elements through a window of 4 cells of 64 bytes (the window wraps many
    times) while rank 1, on another thread, reduces them into its own array: equal to numpy."""
    a, b = _world(tmp_path)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1000) * 100).astype(dtype)
    y = (rng.standard_normal(1000) * 100).astype(dtype)
    want = ufunc(y, x)
    window, _ = _window(a, 1, x.nbytes, 64)
    _taken(a, b, window, x, y, op * 8 + dcode)
    np.testing.assert_array_equal(y, want)
    a.close()
    b.close()


def test_a_base_a_copy_and_a_drain(tmp_path):
    a, b = _world(tmp_path)
    x = np.arange(300, dtype=np.float64)
    base = np.full(300, 10.0)
    for target, code, base_arg, want in (
        (np.zeros(300), 1 * 8 + 1, base, x + 10.0),  # target = base + cell
        (np.zeros(300), 0, None, x),  # a copy
        (None, 1 * 8 + 1, None, None),  # drained: the producer finishes, nothing is written
    ):
        window, _ = _window(a, 1, x.nbytes, 64)
        _taken(a, b, window, x, target, code, base_arg)
        if want is not None:
            np.testing.assert_array_equal(target, want)
    a.close()
    b.close()


def test_a_slice_ends_without_the_peer_and_the_loop_resumes_where_it_was(tmp_path):
    """With nobody taking cells, the producer fills its window and returns False at its deadline;
    the counters in the window let the next call go on from there."""
    a, b = _world(tmp_path)
    src = np.arange(256, dtype=np.float32)  # 1024 bytes: 16 cells through a window of 4
    window, _ = _window(a, 1, src.nbytes, 64)
    assert a.mailboxes.stream(1, window, src, None, None, 0, None, 20, 0, 0) is False
    assert int(window[:8].view(np.uint64)[0]) == 4  # produced: the window is full
    y = np.zeros(256, np.float32)
    _taken(a, b, window, src, y, 0)
    np.testing.assert_array_equal(y, src)
    a.close()
    b.close()


def test_bad_arguments_are_one_clear_error(tmp_path):
    a, b = _world(tmp_path)
    x = np.arange(100, dtype=np.float32)
    window, _ = _window(a, 1, x.nbytes, 64)
    stream = a.mailboxes.stream
    with pytest.raises(ValueError, match="a window for 400 bytes, a src of 396"):
        stream(1, window, x[:99], None, None, 0, None, 0, 0, 0)
    with pytest.raises(ValueError, match="400 bytes coming, a target of 4"):
        stream(1, None, None, window, np.zeros(1, np.float32), 8, None, 0, 0, 0)
    z = np.arange(101, dtype=np.float32)
    with pytest.raises(ValueError, match="overlap without being one array"):
        stream(1, window, z[:100], window, z[1:], 8, None, 0, 0, 0)
    with pytest.raises(ValueError, match="no reduction with code 63"):
        stream(1, None, None, window, np.zeros(100, np.float32), 63, None, 0, 0, 0)
    with pytest.raises(ValueError, match="a window of 10 bytes"):
        stream(1, np.zeros(10, np.uint8), x, None, None, 0, None, 0, 0, 0)
    with pytest.raises(ValueError, match="rank 0 cannot stream with rank 0"):
        stream(0, window, x, None, None, 0, None, 0, 0, 0)
    a.close()
    b.close()


# -- the exchange between two ranks ----------------------------------------------------------------


@pytest.mark.parametrize("dtype, _", DTYPES)
@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum, None])
def test_sendrecv_reduce_streams_every_count(tmp_path, small_cells, ufunc, dtype, _):
    """Both ranks swap and reduce, in cells of 64 bytes: counts from one element (one short cell)
    to thousands (the window wraps), and bit for bit what numpy gives for op(own, peer's)."""

    def body(comm):
        peer, out = 1 - comm.rank, []
        for count in (0, 1, 15, 16, 17, 1000, 4099):
            buf, theirs = pattern(comm.rank, count, dtype), pattern(peer, count, dtype)
            want = theirs.copy() if ufunc is None else ufunc(buf, theirs)
            got = comm.sendrecv_reduce(buf, peer, peer, 5, ufunc)
            out.append((count, got, bool(np.array_equal(buf, want))))
        return out, comm.transport.streams.open

    for cases, still_open in run_local(2, body, transport="shm", directory=str(tmp_path)):
        assert cases == [(c, c, True) for c in (0, 1, 15, 16, 17, 1000, 4099)]
        assert still_open == {}


def test_an_operation_c_does_not_compute_goes_the_usual_way(tmp_path, small_cells):
    def body(comm):
        buf = pattern(comm.rank, 100, "float64")
        comm.sendrecv_reduce(buf, 1 - comm.rank, 1 - comm.rank, 5, np.subtract)
        return buf

    got = run_local(2, body, transport="shm", directory=str(tmp_path))
    np.testing.assert_array_equal(got[0], pattern(0, 100, "float64") - pattern(1, 100, "float64"))


def _count_calls(monkeypatch, cls, name):
    calls = []
    original = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_a_side_that_parked_the_announcement_goes_the_usual_way_and_both_finish(
    tmp_path, small_cells, monkeypatch
):
    """Rank 1 sees rank 0's STREAM record before its own exchange (here: asking has_message parks
    it), so it sends a ring message and takes the stream as a message; rank 0, in its exchange,
    finishes sending and reduces the ring message. Both end with the sum."""
    takes = _count_calls(monkeypatch, Streams, "take")

    def body(comm):
        peer, buf = 1 - comm.rank, pattern(comm.rank, 3000, "float32")
        if comm.rank == 1:
            while not comm.has_message(0, 5):
                pass
        comm.sendrecv_reduce(buf, peer, peer, 5, np.add)
        return buf

    want = expected_result(2, 3000, "float32", ReduceOp.SUM)
    for got in run_local(2, body, transport="shm", directory=str(tmp_path)):
        np.testing.assert_array_equal(got, want)
    assert takes == ["take"]  # rank 1 took the parked stream as a message


def test_a_full_mailbox_sends_the_usual_way(tmp_path, small_cells):
    """Rank 0 fills rank 1's mailbox from it (16 records) before the exchange, so its announcement
    finds no room: it sends a ring message instead, and rank 1's exchange parks the 16, then
    reduces the ring message once its own cells are through."""

    def body(comm):
        peer, buf = 1 - comm.rank, pattern(comm.rank, 3000, "float32")
        if comm.rank == 0:
            for i in range(16):
                comm.send(np.array([i]), 1, tag=9)
        comm.sendrecv_reduce(buf, peer, peer, 5, np.add)
        extra = [int(comm.recv(0, 9)[0]) for _ in range(16)] if comm.rank == 1 else list(range(16))
        return buf, extra

    want = expected_result(2, 3000, "float32", ReduceOp.SUM)
    for got, extra in run_local(2, body, transport="shm", directory=str(tmp_path)):
        np.testing.assert_array_equal(got, want)
        assert extra == list(range(16))


def test_a_plain_recv_takes_a_stream_and_the_exchange_reduces_a_plain_send(tmp_path, small_cells):
    """MPI_Sendrecv_replace matches any send and receive: rank 1 receives rank 0's stream with recv
    (into a new array, and into `out`), then sends; rank 0's exchange reduces what rank 1 sent."""

    def body(comm):
        x = pattern(comm.rank, 2000, "int64")
        if comm.rank == 0:
            comm.sendrecv_reduce(x, 1, 1, 5, np.add)
            comm.sendrecv_reduce(x, 1, 1, 6, np.add)
            return x
        got = comm.recv(0, 5)
        comm.send(np.ones(2000, np.int64), 0, 5)
        out = np.zeros(2000, np.int64)
        comm.recv(0, 6, out=out)
        comm.send(np.ones(2000, np.int64), 0, 6)
        return got, out

    rank0, (got, out) = run_local(2, body, transport="shm", directory=str(tmp_path))
    np.testing.assert_array_equal(got, pattern(0, 2000, "int64"))
    np.testing.assert_array_equal(out, pattern(0, 2000, "int64") + 1)
    np.testing.assert_array_equal(rank0, pattern(0, 2000, "int64") + 2)


def test_counts_that_differ_are_reported_on_both_sides(tmp_path, small_cells):
    """Each side drains the other's stream (so the other finishes) and leaves its buffer alone."""

    def body(comm):
        buf = np.zeros(500 + comm.rank)
        got = comm.sendrecv_reduce(buf, 1 - comm.rank, 1 - comm.rank, 5, np.add)
        return got, buf.tolist(), comm.transport.streams.open

    assert run_local(2, body, transport="shm", directory=str(tmp_path)) == [
        (501, [0.0] * 500, {}),
        (500, [0.0] * 501, {}),
    ]


def test_a_silent_peer_is_a_timeout_naming_it(tmp_path, small_cells):
    a, b = _world(tmp_path)
    comm = Communicator(0, 2, a, timeout_s=0.3)
    with pytest.raises(CommTimeout, match="rank 0: timed out after 0.3s waiting for recv from rank 1 tag 9"):
        comm.sendrecv_reduce(np.ones(5000), 1, 1, 9, np.add)
    comm.close()
    b.close()


def test_a_sender_that_died_mid_stream_is_peer_lost(tmp_path, monkeypatch):
    """A stream taken outside the communicator's slices (a plain recv) checks between slices that
    its sender lives: the window names a process that has exited, which is one clear error."""
    monkeypatch.setattr(shm_stream, "SLICE_MS", 20)
    a, b = _world(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    window, descriptor = _window(a, 1, 8000, 64, pid=dead.pid)
    head = wire.encode_header(0, 5, wire.KIND_STREAM, np.dtype(np.float64), (1000,))
    assert a.mailboxes.try_send(1, head + descriptor)
    comm = Communicator(1, 2, b, timeout_s=5.0)
    with pytest.raises(PeerLost, match=rf"rank 0 \(pid {dead.pid}\) exited while streaming to this rank"):
        comm.recv(0, 5)
    comm.close()
    a.close()


# -- recursive doubling over streams ---------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("inplace", [False, True])
def test_recursive_doubling_over_streams_equals_the_closed_form(tmp_path, small_cells, n, inplace):
    """Every step a whole-buffer stream (a power of two), or folded first (3 ranks), with cells of
    64 bytes: bit-identical on every rank."""

    def body(comm):
        out = []
        for count in (1, n + 1, 1000):
            x = pattern(comm.rank, count, "float32")
            got = allreduce(comm, x, "sum", "rd", inplace=inplace)
            out.append((got is x, got))
        return out

    for rank_out in run_local(n, body, transport="shm", directory=str(tmp_path), timeout_s=30):
        for (same, got), count in zip(rank_out, (1, n + 1, 1000), strict=True):
            assert same == inplace
            np.testing.assert_array_equal(got, expected_result(n, count, "float32", ReduceOp.SUM))


def test_a_stream_message_can_be_detached_and_read_later(tmp_path, small_cells):
    """Parked and then detached (what a rank waiting for room does), a stream is read into memory
    of its own: the sender finishes, and the array is still there for whoever takes it."""

    def body(comm):
        if comm.rank == 0:
            x = pattern(0, 1000, "float64")
            comm.sendrecv_reduce(x, 1, 1, 5, np.add)
            return x
        while not comm.has_message(0, 5):
            pass
        (msg,) = comm._pending[(0, 5)]
        assert isinstance(msg, StreamMessage)
        msg.detach()
        comm.send(np.zeros(1000), 0, 5)
        return comm.recv(0, 5)

    rank0, rank1 = run_local(2, body, transport="shm", directory=str(tmp_path))
    np.testing.assert_array_equal(rank1, pattern(0, 1000, "float64"))
    np.testing.assert_array_equal(rank0, pattern(0, 1000, "float64"))
