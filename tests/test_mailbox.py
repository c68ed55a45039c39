"""The shared-memory mailboxes: records in order, a full mailbox that refuses and rings back, the
spin rule, and two ranks (threads here) that flood each other through full mailboxes and full
rings without deadlocking."""

import os
import threading
import time

import numpy as np
import pytest

from playground.cli.testing import run_scenario
from playground.comm import mailbox
from playground.comm.communicator import Communicator
from playground.comm.shm import ShmChannels
from playground.comm.shm_transport import ShmTransport
from playground.core.errors import CommTimeout


def test_records_arrive_whole_and_in_order(two):
    a, b = two
    sent = [bytes([k % 251]) * k for k in (0, 1, 7, 100, a.max_bytes)]
    for rec in sent:
        assert a.try_send(1, rec)
    got = [b.receive(1000) for _ in sent]
    assert got == sent
    assert b.receive(0) is None
    assert a.try_send(1, b"head-", np.arange(3, dtype=np.uint8))  # a header and a body: one record
    assert b.receive(0) == b"head-\x00\x01\x02"


def test_a_record_larger_than_a_slot_is_an_error(two):
    a, _ = two
    with pytest.raises(ValueError, match="does not fit a mailbox slot"):
        a.try_send(1, b"x" * (a.max_bytes + 1))


def test_full_mailbox_refuses_and_the_receiver_rings_back(two):
    a, b = two
    n = 0
    while a.try_send(1, bytes([n])):
        n += 1
        assert n <= mailbox.SLOTS, "the mailbox never filled"
    assert n == mailbox.SLOTS
    assert a.receive(0) is None  # nothing for rank 0 yet
    assert b.receive(0) == b"\x00"  # frees one slot; rank 0 waits for room: its bell rings
    t0 = time.monotonic()
    assert a.receive(60_000) is None  # returns at once, not after 60 s: room was rung
    assert time.monotonic() - t0 < 5.0  # far below the wait: without the bell it takes all 60 s
    assert a.try_send(1, b"again")
    assert [b.receive(0) for _ in range(n)] == [bytes([k]) for k in range(1, n)] + [b"again"]


def test_each_senders_order_holds_with_many_senders(tmp_path):
    boxes = [mailbox.open_mailboxes(str(tmp_path), r, 4) for r in range(4)]
    try:
        for k in range(5):
            for s in (1, 2, 3):
                assert boxes[s].try_send(0, bytes([s, k]))
        got = [boxes[0].receive(0) for _ in range(15)]
        assert boxes[0].receive(0) is None
        for s in (1, 2, 3):
            assert [g[1] for g in got if g[0] == s] == list(range(5))
    finally:
        for b in boxes:
            b.close()


def test_a_post_to_a_rank_without_mailboxes_is_refused(tmp_path):
    a = mailbox.open_mailboxes(str(tmp_path), 0, 3)
    try:
        assert not a.try_send(2, b"nobody")  # rank 2 has not created its file yet
    finally:
        a.close()


def test_spin_only_while_ranks_do_not_outnumber_cores():
    assert mailbox.spin_policy(2, cores=2) == (mailbox.SPIN_S * 1e9, 0.0)  # pause-spins
    assert mailbox.spin_policy(4, cores=2) == (0.0, mailbox.SPIN_S * 1e9)  # yield-polls only
    assert mailbox.spin_policy(8, cores=2) == (0.0, 0.0)  # sleeps at once


def test_a_waiting_receiver_is_woken_by_a_post_from_another_thread(two):
    a, b = two
    got = []
    t = threading.Thread(target=lambda: got.append(b.receive(10_000)))  # spins, then sleeps
    t.start()
    threading.Event().wait(0.05)
    assert a.try_send(1, b"wake")
    t.join(10)
    assert got == [b"wake"]


@pytest.fixture
def make_pair(tmp_path):
    """make_pair(ring_bytes) -> [rank 0, rank 1] communicators over shm mailboxes, closed afterwards."""
    made = []

    def make(ring_bytes: int):
        comms = []
        boxes = [mailbox.open_mailboxes(str(tmp_path), rank, 2) for rank in range(2)]
        for rank in range(2):
            channels = ShmChannels(rank, str(tmp_path), capacity_bytes=ring_bytes)
            transport = ShmTransport(rank, channels, boxes[rank], 32 * 1024, mailbox.spin_policy(2))
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
    """Each rank sends 2 MB of small records (700 mailbox slots' worth) and 6 MiB through a 1 MiB ring
    before it receives anything: senders must take in what arrives while they wait for room."""
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
def test_large_objects_and_timeouts_on_the_mailbox_path(make_pair):
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


@pytest.mark.timeout(60)
def test_a_spinning_receiver_whose_peer_dies_reports_peer_lost(runs_dir):
    """Two ranks on two cores spin on their bells; rank 1 is SIGKILLed mid-run. Rank 0's waits still
    end in slices (a spin, then a futex sleep with a timeout), so it sees the abort and says why."""
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=2,
        transport="shm",
        sets=[
            "fault.rank=1",
            "fault.action=kill",
            "fault.after_ops=50",
            "params.sizes=[8]",
            "params.iters=100000",
        ],
        timeout_s=50,
    )
    assert code == 1, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and "killed by SIGKILL" in root
    assert any("rank 0" in line and "PeerLost" in line for line in err.splitlines()), err
    assert result["ok"] is False


def test_an_array_of_64_kib_travels_in_its_mailbox_record_and_a_larger_one_is_lent(tmp_path):
    """The default split (shm.SHM_MIN_BYTES, mailbox.SLOT_BYTES): up to 64 KiB one record, which the
    receiver's C `land` copies out; one element more, lent (test_landing.py has the ring's side of the
    split)."""
    from playground.comm.shm import SHM_MIN_BYTES
    from playground.comm.shm_lend import LentMessage, peer_reads_allowed
    from playground.comm.shm_transport import RingMessage, _InlineMessage

    boxes = [mailbox.open_mailboxes(str(tmp_path), rank, 2) for rank in range(2)]
    sender, receiver = (
        ShmTransport(
            rank, ShmChannels(rank, str(tmp_path), capacity_bytes=1 << 20), boxes[rank], SHM_MIN_BYTES
        )
        for rank in range(2)
    )
    try:
        inline = np.arange(16384, dtype=np.float32)  # 64 KiB
        assert sender.send(1, 7, inline) is not None
        msg = receiver.receive(1000)
        assert type(msg) is _InlineMessage and (msg.src, msg.tag) == (0, 7)
        np.testing.assert_array_equal(msg.array(), inline)

        assert sender.send(1, 8, inline) is not None
        landed = np.zeros_like(inline)
        assert receiver.land(0, 8, landed, None, None, 1000) is True
        np.testing.assert_array_equal(landed, inline)

        larger = np.arange(16385, dtype=np.float32)
        done = sender.lend(1, 10, larger)
        msg = receiver.receive(1000)
        assert type(msg) is (LentMessage if peer_reads_allowed() else RingMessage)
        np.testing.assert_array_equal(msg.owned_array(), larger)
        assert done is not None
    finally:
        for t in (sender, receiver):
            t.close()


def test_a_pairs_first_record_longer_than_a_page_maps_all_its_slots_and_a_short_one_does_not(two, tmp_path):
    """native/mailbox.c's warm_up: the receiver's file gets the pair's 16 slots allocated at the first
    record of more than a page (so the next 15 do not fault in fresh slots), not at small ones."""
    a, b = two
    path = tmp_path / "mbox-1"
    slots_bytes = mailbox.SLOTS * mailbox.slot_bytes_for(2)
    for _ in range(3):
        assert a.try_send(1, b"x" * 8)
        assert b.receive(1000) == b"x" * 8
    assert os.stat(path).st_blocks * 512 < slots_bytes // 4  # a page or so
    record = bytes(range(256)) * 80  # 20 KiB: five pages
    assert a.try_send(1, record)
    assert os.stat(path).st_blocks * 512 >= slots_bytes  # every slot of rank 0's mailbox at rank 1
    assert b.receive(1000) == record


def test_slots_shrink_past_15_ranks_so_a_ranks_mailboxes_stay_within_their_budget():
    assert mailbox.slot_bytes_for(2) == mailbox.slot_bytes_for(15) == mailbox.SLOT_BYTES  # 64 KiB inline
    for size in (16, 32, 64, 128, 1024):
        slot = mailbox.slot_bytes_for(size)
        assert slot % 4096 == 0 and slot >= mailbox.MIN_SLOT_BYTES
        assert size * mailbox.SLOTS * slot <= mailbox.FILE_BUDGET_BYTES or slot == mailbox.MIN_SLOT_BYTES
    assert mailbox.slot_bytes_for(64) == 16 << 10 and mailbox.slot_bytes_for(1024) == mailbox.MIN_SLOT_BYTES
