"""The send-side link delay: a message to another host leaves `delay` after it was posted, the
sender never waits, order per (sender, receiver) is kept, and same-host messages are not delayed.
Ranks are threads over real ipc sockets; "hosts" are only labels here, so no root is needed."""

import threading
import time

import numpy as np
import pytest
import zmq

from playground.comm.communicator import Communicator
from playground.comm.delay import DelayedTransport
from playground.comm.world import open_world

pytestmark = pytest.mark.timeout(60)
HOSTS = ["h0", "h0", "h1"]  # ranks 0 and 1 share a host; rank 2 is across the link


@pytest.fixture
def world(tmp_path):
    """world(delay_s, extra) -> three communicators; rank 0's transport delays what goes to h1."""
    ctx = zmq.Context()
    made = []

    def make(delay_s, extra=None):
        transports = open_world("ipc", 3, str(tmp_path), ctx)
        endpoints = [f"ipc://{tmp_path}/rank-{r}.sock" for r in range(3)]
        transports[0] = DelayedTransport(transports[0], 0, ctx, endpoints, HOSTS, delay_s, extra)
        comms = [Communicator(r, 3, t, timeout_s=10.0, hosts=HOSTS) for r, t in enumerate(transports)]
        made.extend(comms)
        return comms

    yield make
    for c in made:
        c.close()
    ctx.term()


def one_way_s(sender, receiver, dst, x) -> tuple[float, float]:
    """(how long the send took, when the message arrived after it was posted)."""
    t0 = time.monotonic()
    sender.send(x, dst, tag=1)
    t_post = time.monotonic() - t0
    receiver.recv(0, 1)
    return t_post, time.monotonic() - t0


@pytest.mark.parametrize("nbytes", [8, 1 << 20])  # inline and zero-copy frames
def test_a_message_to_another_host_arrives_after_the_delay_and_the_sender_does_not_wait(world, nbytes):
    a, b, c = world(0.05)
    x = np.ones(nbytes // 8)
    posted, arrived = one_way_s(a, c, 2, x)
    assert posted < 0.02 and 0.05 <= arrived < 0.5
    posted, arrived = one_way_s(a, b, 1, x)  # same host: straight through
    assert arrived < 0.04


def test_the_sender_may_reuse_its_array_at_once(world):
    a, _, c = world(0.05)
    x = np.arange(100_000, dtype=np.float64)
    a.send(x, 2, tag=3)
    x[:] = -1  # after the post, before the release: the copy went, not this
    np.testing.assert_array_equal(c.recv(0, 3), np.arange(100_000, dtype=np.float64))


def test_order_per_receiver_is_kept_and_objects_and_reserved_sends_are_delayed_too(world):
    a, _, c = world(0.01)
    for k in range(50):
        a.isend(np.full(k % 7 + 1, k), 2, tag=0)
        if k % 10 == 0:
            a.send_obj({"k": k}, 2, tag=5)
    a.isend_computed(2, 6, 4, np.int64, lambda out: out.fill(7))
    assert [int(c.recv(0, 0)[0]) for _ in range(50)] == list(range(50))
    assert [c.recv_obj(0, 5)["k"] for _ in range(5)] == [0, 10, 20, 30, 40]
    np.testing.assert_array_equal(c.recv(0, 6), np.full(4, 7))


def test_a_delay_link_drill_adds_to_its_hosts_traffic_from_its_start(world):
    a, _, c = world(0.0, extra=("h1", 0.2, time.monotonic() + 0.1))
    _, before = one_way_s(a, c, 2, np.ones(4))
    time.sleep(0.15)
    _, after = one_way_s(a, c, 2, np.ones(4))
    assert before < 0.08 and 0.2 <= after < 0.6


def test_close_stops_the_release_thread(world):
    a, *_ = world(5.0)
    a.send(np.ones(4), 2)  # due in 5 s, dropped at close
    t0 = time.monotonic()
    a.transport.close()
    assert time.monotonic() - t0 < 1.0
    assert not any(t.name.startswith("delay-rank-0") for t in threading.enumerate())
