"""The communicator's contract, run over every transport: in-process queues, ZeroMQ over ipc and
tcp, and shared memory with pipes. Ranks are threads of this process (`run_local`), so the same
matching, deadline and abort code runs as in a launched run, on real sockets, pipes and rings."""

import numpy as np
import pytest
import zmq

from playground.collectives import ALGORITHMS, ReduceOp, allreduce
from playground.collectives.check import expected_result, pattern
from playground.comm.communicator import Communicator
from playground.comm.faults import FaultyTransport
from playground.comm.world import open_world, run_local
from playground.core.errors import CommTimeout, FaultInjected, InvalidPeer, MessageMismatch, PeerLost

TRANSPORTS = ["local", "ipc", "tcp", "shm"]
pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("kind", TRANSPORTS)]


def run(kind, tmp_path, n, fn, timeout_s=10.0):
    return run_local(n, fn, timeout_s=timeout_s, transport=kind, directory=str(tmp_path))


@pytest.fixture
def pair(tmp_path):
    """pair(kind, timeout_s) -> two communicators of one world, used from this thread; closed after."""
    made, contexts = [], []

    def make(kind, timeout_s=10.0, control=None):
        ctx = zmq.Context() if kind in ("ipc", "tcp") else None
        contexts.append(ctx)
        transports = open_world(kind, 2, str(tmp_path), ctx)
        comms = [
            Communicator(r, 2, t, timeout_s=timeout_s, control=control) for r, t in enumerate(transports)
        ]
        made.extend(comms)
        return comms

    yield make
    for c in made:
        c.close()
    for ctx in contexts:
        if ctx is not None:
            ctx.term()


ARRAYS = [
    np.arange(0, dtype=np.float32),
    np.arange(1, dtype=np.int64),
    np.arange(12, dtype=np.float64).reshape(3, 4),
    np.arange(40_000, dtype=np.float32),  # 160 KB: zero-copy over ZeroMQ, a ring slot on shm
]


def test_arrays_arrive_whole_with_dtype_and_shape(kind, tmp_path):
    def body(comm):
        if comm.rank == 0:
            for k, x in enumerate(ARRAYS):
                comm.send(x, 1, tag=k)
            return None
        got = [comm.recv(0, tag=k) for k in range(len(ARRAYS))]
        into = [comm.recv(0, tag=10 + k, out=np.empty_like(x)) for k, x in enumerate(ARRAYS)]
        return got, into

    def both(comm):
        if comm.rank == 0:
            body(comm)
            for k, x in enumerate(ARRAYS):
                comm.send(x, 1, tag=10 + k)
            return None
        return body(comm)

    got, into = run(kind, tmp_path, 2, both)[1]
    for x, y, z in zip(ARRAYS, got, into, strict=True):
        assert y.dtype == x.dtype and y.shape == x.shape and np.array_equal(y, x)
        assert z.dtype == x.dtype and z.shape == x.shape and np.array_equal(z, x)


def test_one_tag_keeps_order_and_other_tags_wait_parked(kind, tmp_path):
    def body(comm):
        if comm.rank == 0:
            for k in range(20):
                comm.send(np.full(3, k, dtype=np.int32), 1, tag=k % 2)
            comm.send_obj({"last": True}, 1, tag=5)
            return None
        late = comm.recv_obj(0, tag=5)  # everything before it is parked meanwhile
        odd = [int(comm.recv(0, tag=1)[0]) for _ in range(10)]
        even = [int(comm.recv(0, tag=0)[0]) for _ in range(10)]
        return late, odd, even

    late, odd, even = run(kind, tmp_path, 2, body)[1]
    assert late == {"last": True}
    assert odd == list(range(1, 20, 2)) and even == list(range(0, 20, 2))


def test_requests_and_sendrecv(kind, tmp_path):
    def body(comm):
        peer = 1 - comm.rank
        x = np.arange(100_000, dtype=np.float64) * (comm.rank + 1)  # zero-copy over ZeroMQ
        req = comm.isend(x, peer, tag=3)
        rreq = comm.irecv(peer, tag=3)
        got = rreq.wait()
        req.wait()
        assert req.test() and rreq.test() is False  # nothing more from the peer on tag 3
        y = comm.sendrecv(np.array([comm.rank]), peer, peer, tag=4)
        return got, int(y[0])

    (got0, y0), (got1, y1) = run(kind, tmp_path, 2, body)
    assert np.array_equal(got0, np.arange(100_000) * 2.0) and np.array_equal(got1, np.arange(100_000) * 1.0)
    assert (y0, y1) == (1, 0)


def test_objects_small_and_large_and_barrier(kind, tmp_path):
    big = {"rows": [{"size": k, "name": "x" * 50} for k in range(200)]}  # ~13 KB: more than a pipe record

    def body(comm):
        comm.barrier()
        everyone = comm.allgather_obj({**big, "rank": comm.rank})
        root = comm.bcast_obj({"from": comm.rank} if comm.rank == 2 else None, root=2)
        comm.barrier()
        return everyone, root

    for everyone, root in run(kind, tmp_path, 3, body):
        assert everyone == [{**big, "rank": r} for r in range(3)]
        assert root == {"from": 2}


def test_recv_reduce_and_computed_sends(kind, tmp_path):
    def body(comm):
        peer = 1 - comm.rank
        for count in (5, 20_000):  # inline, and ring-sized / zero-copy
            comm.isend_computed(
                peer, 7, count, np.float32, lambda out: out.__setitem__(slice(None), 2.0)
            ).wait()
            target = np.ones(count, dtype=np.float32)
            assert comm.recv_reduce(peer, 7, target, np.add, base=np.full(count, 3.0, np.float32)) == count
            assert np.all(target == 5.0)
        comm.send(np.arange(4, dtype=np.float32), peer, tag=8)
        target = np.zeros(6, dtype=np.float32)
        assert comm.recv_reduce(peer, 8, target, np.add) == 4  # a count that does not fit: reported
        assert np.all(target == 0)
        return True

    assert run(kind, tmp_path, 2, body) == [True, True]


def test_sendrecv_reduce_swaps_in_place_and_keeps_order(kind, tmp_path):
    """The step of recursive doubling: over shm, untraced, one C call that posts and lands; the
    same results and the same matching as isend + recv_reduce everywhere else."""

    def body(comm):
        peer, me = 1 - comm.rank, comm.rank + 1.0
        out = []
        for count in (2, 20_000):  # landed in C on shm, and ring-sized / zero-copy
            buf = np.full(count, me, np.float32)
            out.append((comm.sendrecv_reduce(buf, peer, peer, 3, np.add), set(buf.tolist())))
            buf = np.full(count, me, np.float32)
            out.append((comm.sendrecv_reduce(buf, peer, peer, 3), set(buf.tolist())))  # a copy
        comm.send(np.array([7.0]), peer, tag=4)  # another tag first: parked, not lost
        comm.send(np.array([5.0]), peer, tag=3)  # this tag, sent first: taken first
        buf = np.array([1.0])
        out.append((comm.sendrecv_reduce(buf, peer, peer, 3, np.add), buf.tolist()))
        out.append((comm.recv(peer, 3).tolist(), comm.recv(peer, 4).tolist()))
        buf = np.zeros(2 + comm.rank)  # counts that differ: reported, the buffer left alone
        out.append((comm.sendrecv_reduce(buf, peer, peer, 5, np.add), buf.tolist()))
        return out

    got = run(kind, tmp_path, 2, body)
    for rank, mine in enumerate(got):
        peer_value = 2.0 - rank
        assert mine[:4] == [(2, {3.0}), (2, {peer_value}), (20_000, {3.0}), (20_000, {peer_value})]
        assert mine[4:] == [(1, [6.0]), ([1.0], [7.0]), (3 - rank, [0.0] * (2 + rank))]


def test_a_transport_wrapped_later_is_not_bypassed(kind, tmp_path):
    """A drill or a recorder may wrap `comm.transport` after the fact: the native paths are re-read."""

    def body(comm):
        inner = comm.transport
        comm.transport = FaultyTransport(inner, comm.rank, "raise", after_ops=10**9)
        assert comm._exchange is None and comm._land is None
        buf = np.ones(2, np.float32)
        assert comm.sendrecv_reduce(buf, 1 - comm.rank, 1 - comm.rank, 3, np.add) == 2
        return comm.transport.num_ops, buf.tolist()

    assert run(kind, tmp_path, 2, body) == [(1, [2.0, 2.0])] * 2


def test_sendrecv_reduce_times_out_naming_the_peer_and_tag(kind, pair):
    comm, _ = pair(kind, timeout_s=0.3)
    with pytest.raises(CommTimeout, match="rank 0: timed out after 0.3s waiting for recv from rank 1 tag 9"):
        comm.sendrecv_reduce(np.ones(2), 1, 1, 9, np.add)


@pytest.mark.parametrize("algorithm", sorted(a for a in ALGORITHMS["allreduce"] if a != "auto"))
@pytest.mark.parametrize("n", [1, 3, 4])
def test_allreduce_grid(kind, tmp_path, algorithm, n):
    """Every algorithm, bit-exact on every rank, with messages of 1-2 elements and one large one."""

    def body(comm):
        out = []
        for count, segment_bytes in ((0, 8), (n + 1, 8), (50_001, 1 << 20)):
            for op in (ReduceOp.SUM, ReduceOp.MAX):
                x = pattern(comm.rank, count, "float32")
                out.append(allreduce(comm, x, op, algorithm, segment_bytes))
        return out

    results = run(kind, tmp_path, n, body)
    want = [
        expected_result(n, c, "float32", op)
        for c in (0, n + 1, 50_001)
        for op in (ReduceOp.SUM, ReduceOp.MAX)
    ]
    for r in range(n):
        for got, w in zip(results[r], want, strict=True):
            assert got.tobytes() == w.tobytes()


def test_flooding_each_other_before_receiving_makes_progress(kind, tmp_path):
    """Both ranks send 2 MB of small messages and 6 MiB of large ones before receiving anything:
    on shm the pipe and ring fill, so senders must take in what arrives while they wait."""
    small = [np.full(700, k, dtype=np.float32) for k in range(700)]
    large = [np.full(49_152, k, dtype=np.float32) for k in range(32)]

    def body(comm):
        peer = 1 - comm.rank
        for x in small:
            comm.send(x + comm.rank, peer, tag=1)
        for x in large:
            comm.send(x + comm.rank, peer, tag=2)
        ok_small = all(np.array_equal(comm.recv(peer, 1), x + peer) for x in small)
        ok_large = all(np.array_equal(comm.recv(peer, 2), x + peer) for x in large)
        return ok_small, ok_large

    assert run(kind, tmp_path, 2, body, timeout_s=30) == [(True, True), (True, True)]


def test_timeout_names_what_was_awaited(kind, pair):
    comm, _ = pair(kind)
    with pytest.raises(
        CommTimeout, match="rank 0: timed out after 0.2s waiting for recv from rank 1 tag 9"
    ) as info:
        comm.recv(1, 9, timeout_s=0.2)
    e = info.value
    assert (e.rank, e.peer, e.tag, e.op, e.direction, e.waited_s) == (0, 1, 9, "recv", "from", 0.2)


def test_a_peer_that_is_not_a_rank_is_one_clear_error(kind, pair):
    comm, _ = pair(kind)
    with pytest.raises(InvalidPeer, match=r"rank 0: destination 5 is not a rank \(world size 2\)") as info:
        comm.send(np.ones(3), 5)
    assert isinstance(info.value, ValueError) and info.value.peer == 5 and info.value.direction == "to"
    with pytest.raises(InvalidPeer, match=r"rank 0: source -1 is not a rank \(world size 2\)"):
        comm.recv(-1)
    with pytest.raises(InvalidPeer, match="destination 2"):
        comm.send_obj({}, 2)


def test_an_object_where_an_array_was_expected(kind, pair):
    a, b = pair(kind)
    a.send_obj({"x": 1}, 1, tag=3)
    with pytest.raises(MessageMismatch, match="rank 1: expected an array from rank 0 tag 3, got an object"):
        b.recv(0, 3)
    a.send(np.ones(2), 1, tag=4)
    with pytest.raises(MessageMismatch, match="expected an object from rank 0 tag 4, got an array"):
        b.recv_obj(0, 4)


class _Aborted:
    def abort_reason(self):
        return "rank 7 failed: boom"

    def progress(self, done, total, label=""):
        pass


def test_an_abort_ends_a_wait_within_a_slice(kind, pair):
    comm, _ = pair(kind, timeout_s=30.0, control=_Aborted())
    with pytest.raises(
        PeerLost, match="rank 0: aborted while waiting for recv from rank 1 tag 2: rank 7 failed"
    ) as info:
        comm.recv(1, 2)
    assert (info.value.peer, info.value.tag, info.value.op) == (1, 2, "recv")


def test_fault_drills_wrap_the_transport(kind, tmp_path):
    """`corrupt` flips one bit of the first array from post after_ops + 1 on; `raise` fires there."""

    def body(comm):
        if comm.rank == 0:
            comm.transport = FaultyTransport(comm.transport, 0, "corrupt", after_ops=2)
            comm.send_obj({"op": 1}, 1)  # op 1
            for k in range(3):  # ops 2-4: the first array at op 3 or later is corrupted
                comm.send(np.zeros(4, dtype=np.uint8), 1, tag=k)
            return comm.transport.num_ops
        comm.recv_obj(0)
        return [comm.recv(0, tag=k).tolist() for k in range(3)]

    ops, got = run(kind, tmp_path, 2, body)
    assert ops == 4
    assert got == [[0, 0, 0, 0], [0x40, 0, 0, 0], [0, 0, 0, 0]]

    def raising(comm):
        if comm.rank == 0:
            comm.transport = FaultyTransport(comm.transport, 0, "raise", after_ops=1)
            comm.send(np.ones(1), 1)
            comm.send(np.ones(1), 1)
        comm.recv(0)

    with pytest.raises(FaultInjected, match="rank 0: injected fault after 1 operations") as info:
        run(kind, tmp_path, 2, raising)
    assert (info.value.rank, info.value.after_ops) == (0, 1)


def test_a_timeout_names_the_collective_and_its_sequence_number(kind, tmp_path):
    """As NCCL's watchdog does: which collective was running, and its number on this communicator."""

    def body(comm):
        comm.hosts = ["h0", "h1"]
        x = np.ones(8, dtype=np.float32)
        allreduce(comm, x)
        allreduce(comm, x, algorithm="tree")
        if comm.rank == 0:
            allreduce(comm, x)  # rank 1 never joins the third
        return comm.op_context(1)

    with pytest.raises(
        CommTimeout, match=r"rank 0: timed out .* \(in allreduce ring #3; rank 1 is on host h1\)"
    ):
        run(kind, tmp_path, 2, body, timeout_s=0.5)


def test_op_context_says_after_which_collective_between_them(kind, pair):
    a, _ = pair(kind)
    assert a.op_context(1) == ""
    with a.collective("allgather", "ring"):
        assert a.op_context() == "in allgather ring #1"
    assert a.op_context() == "after allgather ring #1" and a.current_op is None


def test_a_rank_may_send_to_itself(kind, tmp_path):
    def body(comm):
        comm.send(np.arange(3) + comm.rank, comm.rank, tag=6)
        return comm.recv(comm.rank, tag=6).tolist()

    assert run(kind, tmp_path, 2, body) == [[0, 1, 2], [1, 2, 3]]
