"""Lent arrays over shared memory (comm/shm_lend.py, native/cma.c): the receiver reads a large array
straight from the sender's memory. Checked: the read itself and its errors; a lent send arriving
through every way a receiver takes a message (into a target, as a new array, reduced, parked and
detached, in another order than sent); the sender's request completing only once the receiver has
read; the plain path where the kernel refuses such reads; and the all-to-all family over shm with
lent blocks against the closed form."""

import os
import subprocess
import sys

import numpy as np
import pytest
from _playground_native import address_of, probe_peer_reads, read_peer

from playground.collectives import ReduceOp, alltoall, gather, scatter, sendrecv
from playground.collectives.check import expected_output, make_input
from playground.comm import shm_transport
from playground.comm.shm_lend import LentMessage
from playground.comm.world import run_local
from playground.core.errors import PeerLost

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not probe_peer_reads(), reason="the kernel refuses cross-process reads here"),
]

N = 20_000  # float64: 160 KB, above the 64 KiB up to which arrays travel inline


def test_read_peer_copies_a_buffer_and_names_what_the_kernel_refused():
    x = np.arange(1000, dtype=np.int64)
    out = np.empty_like(x)
    read_peer(os.getpid(), address_of(x), out)
    np.testing.assert_array_equal(out, x)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(OSError):
        read_peer(dead.pid, address_of(x), out)


def test_a_lent_message_from_a_gone_sender_is_peer_lost():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    msg = LentMessage(3, 7, np.dtype(np.float32), (16,), None, 64, dead.pid, 4096)
    with pytest.raises(PeerLost, match="rank 3"):
        msg.copy_into(np.empty(16, np.float32))


def test_lent_arrays_arrive_every_way_a_receiver_takes_them(tmp_path):
    """Into a target, as an array of its own, reduced, and two parked (taken in the other order):
    the values are the sender's, and every lent request completes."""

    def body(comm):
        if comm.rank == 0:
            xs = [np.full(N, float(k + 1)) for k in range(5)]
            reqs = [comm.isend_lent(x, 1, tag) for tag, x in enumerate(xs)]
            for req in reqs:
                req.wait()
            return [type(req.completion).__name__ for req in reqs]
        into = np.empty(N)
        comm.recv(0, 0, out=into)
        owned = comm.recv(0, 1)
        reduced = np.ones(N)
        comm.recv_reduce(0, 2, reduced, np.add)
        later = comm.recv(0, 4)  # tag 3 arrives first and is parked
        earlier = comm.recv(0, 3)
        return [float(a.min()) + float(a.max()) for a in (into, owned, reduced, earlier, later)]

    sender, got = run_local(2, body, transport="shm", directory=str(tmp_path))
    assert sender == ["Lent"] * 5  # lent: each complete once read
    assert got == [2.0, 4.0, 8.0, 8.0, 10.0]


def test_a_lent_send_completes_only_once_the_receiver_has_read_it(tmp_path):
    def body(comm):
        if comm.rank == 0:
            x = np.arange(N, dtype=np.float64)
            req = comm.isend_lent(x, 1, 5)
            before = req.test()
            comm.send_obj({"posted": True}, 1)
            req.wait()
            return before
        assert comm.recv_obj(0) == {"posted": True}
        return float(comm.recv(0, 5).sum())

    before, total = run_local(2, body, transport="shm", directory=str(tmp_path))
    assert before is False
    assert total == float(np.arange(N, dtype=np.float64).sum())


def test_where_reads_are_refused_a_lent_send_is_a_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(shm_transport, "peer_reads_allowed", lambda: False)

    def body(comm):
        if comm.rank == 0:
            req = comm.isend_lent(np.arange(N, dtype=np.float64), 1, 5)
            return req.test()
        return float(comm.recv(0, 5)[-1])

    assert run_local(2, body, transport="shm", directory=str(tmp_path)) == [True, float(N - 1)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_alltoall_family_with_lent_blocks_equals_the_closed_form(tmp_path, n):
    count = 32768 * n  # float32 blocks of 128 KiB: lent

    def body(comm):
        out = {}
        for algo in ("pairwise", "scattered"):
            x = make_input("alltoall", comm.rank, n, count, "float32", False)
            out["alltoall " + algo] = (alltoall(comm, x, algo), x.copy())
        x = make_input("sendrecv", comm.rank, n, count, "float32", False)
        out["sendrecv"] = (sendrecv(comm, x), x.copy())
        for algo in ("linear", "tree"):
            x = make_input("gather", comm.rank, n, count, "float32", False)
            out["gather " + algo] = (gather(comm, x, algorithm=algo), x.copy())
            x = make_input("scatter", comm.rank, n, count * n, "float32", False)
            out["scatter " + algo] = (scatter(comm, x, algorithm=algo), x.copy())
        return out

    for rank, got in enumerate(run_local(n, body, transport="shm", directory=str(tmp_path))):
        for what, (result, x) in got.items():
            collective = what.split()[0]
            c = count * n if collective == "scatter" else count
            want = expected_output(collective, rank, n, c, "float32", ReduceOp.SUM)
            if want is None:
                assert result is None, what
            else:
                np.testing.assert_array_equal(np.asarray(result).reshape(-1), want, err_msg=what)
            np.testing.assert_array_equal(
                x, make_input(collective, rank, n, c, "float32", False), err_msg=what
            )


def test_over_ipc_a_lent_array_is_read_from_the_sender_too(tmp_path):
    def body(comm):
        if comm.rank == 0:
            reqs = [comm.isend_lent(np.full(N, 3.0), 1, 5), comm.isend_lent(np.full(N, 4.0), 1, 6)]
            for req in reqs:
                req.wait()
            return type(reqs[0].completion).__name__
        later = comm.recv(0, 6)  # parked first
        return float(comm.recv(0, 5).sum() + later.sum())

    assert run_local(2, body, transport="ipc", directory=str(tmp_path)) == ["Lent", 7.0 * N]
