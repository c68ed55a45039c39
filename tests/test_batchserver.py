"""The batching server's loop in this thread, over inproc sockets, with requests sent from its own
callbacks at chosen moments: which requests a service takes and when it starts, without a clock race.

A service in a busy period starts when the previous one ended (its replies and reads count as
service), so it may take only what was queued by then: a request sent while the replies went out
waits for the next service, and no request ever starts before it was sent."""

import time

import pytest
import zmq

from playground.queueing.batchserver import run_batch_server
from playground.queueing.loadgen import STOP, decode_reply, encode_request

SERVICE_S = 0.002


@pytest.fixture
def sockets():
    ctx = zmq.Context()
    pull, client = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)  # the server's requests, and their sender
    push, replies = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)  # the server's replies, and their reader
    pull.bind("inproc://requests")
    client.connect("inproc://requests")
    replies.bind("inproc://replies")
    push.connect("inproc://replies")
    yield pull, client, push, replies
    for sock in (pull, client, push, replies):
        sock.close(linger=0)
    ctx.term()


def test_a_request_sent_while_replies_go_out_is_not_backdated_into_the_busy_period(sockets):
    pull, client, push, replies = sockets
    sent_s = {}

    def send(req_id: int, cap: float) -> None:
        sent_s[req_id] = time.monotonic()
        client.send(encode_request(req_id, 0, cap))
        assert pull.poll(1000)  # delivered before the server reads again

    def on_served(served: int, load_id: int) -> None:
        if served == 1:  # request 1's reply is out, request 2 still waits: a busy period goes on
            send(3, 4)
        elif served == 3:
            client.send(encode_request(STOP, 0, 0.0))

    send(1, 1)  # a batch of one (its value caps the batch)
    send(2, 4)  # could batch with up to 3 more
    stats = run_batch_server(
        pull,
        push,
        cost_s=lambda batch: SERVICE_S,
        max_batch_of=lambda first: int(first[2]),
        spin_tail_s=0.0,
        idle_timeout_s=10.0,
        on_served=on_served,
        compensate=False,
    )
    got = {}
    while replies.poll(0):
        req_id, _, start, end, size = decode_reply(replies.recv())
        got[req_id] = (start, end, size)
    assert stats["served"] == 3 and stats["batches"] == 3
    # Request 2 was waiting when request 1's service ended: its service starts right there.
    assert got[2][0] == got[1][1]
    # Request 3 was sent after that end: not in request 2's batch, and it starts after its send,
    # at the end of request 2's service (it was waiting by then: the busy period goes on).
    assert got[2][2] == 1 and got[3][2] == 1
    assert got[3][0] >= sent_s[3] > got[1][1]
    assert got[3][0] == got[2][1]
    for req_id, (start, end, _) in got.items():
        assert sent_s[req_id] <= start <= end
