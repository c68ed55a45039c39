"""The pipe inboxes of the shared-memory path: records, full pipes, and two ranks (threads here)
that flood each other through full pipes and full rings without deadlocking."""

import threading

import numpy as np
import pytest

from playground.comm import pipes
from playground.comm.communicator import Communicator
from playground.comm.shm import ShmChannels
from playground.comm.shm_transport import ShmTransport
from playground.errors import CommTimeout


@pytest.fixture
def two_inboxes(tmp_path):
    a, b = pipes.Inboxes(0, str(tmp_path)), pipes.Inboxes(1, str(tmp_path))
    yield a, b
    a.close()
    b.close()


def test_records_arrive_whole_and_in_order(two_inboxes):
    a, b = two_inboxes
    sent = [bytes([k % 251]) * k for k in (0, 1, 7, 100, pipes.MAX_RECORD)]
    for rec in sent:
        assert a.try_send(1, rec)
    got = [b.next_record(1000) for _ in sent]
    assert got == sent
    assert b.next_record(0) is None


def test_full_pipe_refuses_and_a_missing_inbox_is_not_an_error(two_inboxes, tmp_path):
    a, b = two_inboxes
    rec = b"x" * pipes.MAX_RECORD
    n = 0
    while a.try_send(1, rec):
        n += 1
        assert n < 10_000, "the pipe never filled"
    assert n * pipes.PIPE_BUF >= 64 * 1024  # at least the default pipe size was usable
    assert b.next_record(0) == rec
    assert a.try_send(1, rec)  # room again after one record was taken
    assert not a.try_send(5, b"nobody")  # rank 5 has not created its inbox


def test_no_spinning_when_ranks_outnumber_cores():
    assert pipes.spin_budget_s(10_000) == 0.0
    assert pipes.spin_budget_s(1) > 0.0


@pytest.fixture
def make_pair(tmp_path):
    """make_pair(ring_bytes) -> [rank 0, rank 1] communicators over shm + pipes, closed afterwards."""
    made = []

    def make(ring_bytes: int):
        comms = []
        for rank in range(2):
            channels = ShmChannels(rank, str(tmp_path), capacity_bytes=ring_bytes)
            transport = ShmTransport(rank, channels, pipes.Inboxes(rank, str(tmp_path)), 32 * 1024)
            comms.append(Communicator(rank, 2, transport, timeout_s=10.0))
        made.extend(comms)
        return comms

    yield make
    for c in made:
        c.close()


def _run_both(fn, comms):
    errors, results = [], [None, None]

    def target(c):
        try:
            results[c.rank] = fn(c)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "deadlock: a rank is still waiting"
    assert not errors, errors
    return results


@pytest.mark.timeout(60)
def test_two_ranks_flooding_each_other_make_progress(make_pair):
    """Each rank sends 2 MB of small records (twice a pipe) and 6 MiB through a 1 MiB ring before it
    receives anything: senders must take in what arrives while they wait for room."""
    comms = make_pair(1 << 20)
    small = [np.full(700, k, dtype=np.float32) for k in range(700)]  # 2,800 B each: inline records
    large = [np.full(49_152, k, dtype=np.float32) for k in range(32)]  # 192 KiB each: ring

    def flood(c):
        peer = 1 - c.rank
        for x in small:
            c.send(x + c.rank, peer, tag=1)
        for x in large:
            c.send(x + c.rank, peer, tag=2)
        ok_small = all(np.array_equal(c.recv(peer, 1), x + peer) for x in small)
        ok_large = all(np.array_equal(c.recv(peer, 2), x + peer) for x in large)
        return ok_small, ok_large

    assert _run_both(flood, comms) == [(True, True), (True, True)]


@pytest.mark.timeout(60)
def test_ring_space_is_released_in_arrival_order_not_receive_order(make_pair):
    """Receiving a later tag first must not hand back the space of an earlier, unread message."""
    sender, receiver = make_pair(64 + 3 * 40_000)
    a, b, c = (np.full(10_000, v, dtype=np.float32) for v in (1.0, 2.0, 3.0))  # 40,000 B: ring
    sender.send(a, 1, tag=1)
    sender.send(b, 1, tag=2)
    assert np.array_equal(receiver.recv(0, 2), b)
    sender.send(c, 1, tag=3)  # must not land on a's bytes, which are still unread
    assert np.array_equal(receiver.recv(0, 1), a)
    assert np.array_equal(receiver.recv(0, 3), c)


@pytest.mark.timeout(60)
def test_large_objects_and_timeouts_on_the_pipe_path(make_pair):
    comms = make_pair(1 << 20)
    big = {"rows": [{"size": k, "name": "x" * 50} for k in range(200)]}  # about 13 KB of JSON
    got = _run_both(lambda c: c.allgather_obj({**big, "rank": c.rank}), comms)
    assert got[0] == got[1] == [{**big, "rank": 0}, {**big, "rank": 1}]
    with pytest.raises(CommTimeout, match="rank 0: timed out after 0.2s waiting for recv from rank 1 tag 9"):
        comms[0].recv(1, 9, timeout_s=0.2)


@pytest.mark.timeout(60)
def test_a_sender_whose_peer_never_receives_times_out_naming_it(make_pair):
    sender, _ = make_pair(64 + 50_000)
    sender.timeout_s = 0.3
    sender.send(np.zeros(10_000, dtype=np.float32), 1, tag=4)  # 40,000 B: fits the ring
    with pytest.raises(
        CommTimeout,
        match=r"rank 0: timed out after 0.3s waiting for room to send to rank 1 "
        r"\(tag 4\) in the shared-memory ring to it",
    ) as info:
        sender.send(np.zeros(10_000, dtype=np.float32), 1, tag=4)  # no room until rank 1 receives
    assert info.value.peer == 1
