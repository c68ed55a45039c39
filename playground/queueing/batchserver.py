"""A single server over ZeroMQ that serves its queue one request or one batch at a time.

The waiting room is an application-level FIFO (a deque) that the server refills, before every
service, with everything already delivered to its PULL socket -- "take whatever is queued" in
the lecture's batching section is literally `len(queue)`. With max_batch = 1 this is the plain
single-server queue of section 2.3.

Control messages travel in the same stream as requests, so they are seen in order: ABORT(load)
drops what is still queued for that load and is acknowledged after every reply of that load
(an overloaded run can end without draining a backlog that would take minutes); STOP ends.
"""

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

from playground.core.errors import WaitTimeout
from playground.core.machine import sleep_until
from playground.queueing.loadgen import ABORT, STOP, bind_random, decode_request, encode_reply

# one queued request: (req_id, load_id, value)
Item = tuple[int, int, float]


def take_delivered(pull: zmq.Socket, inbox: deque[tuple[float, bytes]]) -> None:
    """Move every message already delivered to `pull` into `inbox`, each stamped with a time taken
    after it was read: a request stamped t was sent before t."""
    bufs = []
    while True:
        try:
            bufs.append(pull.recv(zmq.NOBLOCK))
        except zmq.Again:
            break
    seen_s = time.monotonic()
    inbox.extend((seen_s, buf) for buf in bufs)


def run_batch_server(
    pull: zmq.Socket,
    push: zmq.Socket,
    cost_s: Callable[[list[Item]], float],
    max_batch_of: Callable[[Item], int],
    spin_tail_s: float,
    idle_timeout_s: float,
    on_served: Callable[[int, int], None] | None = None,  # (served so far, load id of the last batch)
    check_alive: Callable[[], None] | None = None,
    compensate: bool = True,
) -> dict:
    """Serve until STOP; returns counts and the service time actually delivered.

    `cost_s(batch)` is the service time a batch should take, `max_batch_of(first item)` caps the
    batch. Service time is measured from the previous service's end while requests are waiting,
    so the time spent sending replies and reading requests counts as service. Such a service starts
    at that end, and so takes only the requests queued by then (what had been read when it ended):
    one that arrived while the replies went out waits for the next service, never starts before it
    was sent. With `compensate`, time lost to late wake-ups (the process descheduled on a busy
    machine) is paid back by shortening the next services, so the server's *mean* busy time --
    and so the load rho -- stays what was asked; each single service may be off by the debt.
    Raises WaitTimeout when nothing arrives for `idle_timeout_s`.
    """
    server = _Server(pull, push, cost_s, max_batch_of, spin_tail_s, compensate)
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    idle_since = time.monotonic()
    while True:
        if not server.queue and not server.inbox:
            if not poller.poll(200):
                if check_alive is not None:
                    check_alive()
                if time.monotonic() - idle_since > idle_timeout_s:
                    raise WaitTimeout(
                        f"server: no request for {idle_timeout_s:.0f}s (served {server.served})",
                        what="a request",
                        waited_s=idle_timeout_s,
                    )
                continue
        take_delivered(pull, server.inbox)
        if server.take_inbox():
            return server.counts()
        if server.busy_from is not None and (not server.queue or server.queue[0][0] > server.busy_from):
            server.busy_from = None  # what was waiting when the last service ended was dropped (ABORT)
        if not server.queue:
            continue
        last_load = server.serve_batch()
        idle_since = time.monotonic()
        if on_served is not None:
            on_served(server.served, last_load)


class _Server:
    """`run_batch_server`'s state between services: what was read and what waits, the counts, the
    debt of late wake-ups, and when the current busy period's last service ended."""

    def __init__(self, pull, push, cost_s, max_batch_of, spin_tail_s: float, compensate: bool):
        self.pull, self.push, self.cost_s, self.max_batch_of = pull, push, cost_s, max_batch_of
        self.spin_tail_s, self.compensate = spin_tail_s, compensate
        self.inbox: deque[tuple[float, bytes]] = deque()  # read off the socket, not yet looked at
        self.queue: deque[tuple[float, Item]] = deque()  # (when it was seen, the request), in arrival order
        self.served = self.dropped = self.batches = 0
        self.busy_s = self.overshoot_s = 0.0
        self.debt_s = 0.0  # service delivered beyond what was asked, still to pay back
        self.busy_from: float | None = None  # end of the previous service when the next request was waiting

    def take_inbox(self) -> bool:
        """Queue what was read, in the order it came (a control message applies to what came before
        it): ABORT drops its load's queued requests and is acknowledged; True on STOP."""
        while self.inbox:
            seen_s, buf = self.inbox.popleft()
            req_id, load_id, value = decode_request(buf)
            if req_id == STOP:
                return True
            if req_id == ABORT:
                kept = deque(entry for entry in self.queue if entry[1][1] != load_id)
                self.dropped += len(self.queue) - len(kept)
                self.queue = kept
                self.push.send(encode_reply(ABORT, load_id, 0.0, 0.0, 0))
                continue
            self.queue.append((seen_s, (req_id, load_id, value)))
        return False

    def serve_batch(self) -> int:
        """One service of the requests queued when it starts (up to the batch cap), the replies
        sent; returns the load id of its last request."""
        # In a busy period the next service starts when the previous one ended: the server's own
        # messaging (replies, draining the socket) is part of its service time, not free time.
        t_start = self.busy_from if self.busy_from is not None else time.monotonic()
        queue = self.queue
        size = max(1, min(len(queue), self.max_batch_of(queue[0][1])))
        batch: list[Item] = []
        while queue and len(batch) < size and queue[0][0] <= t_start:  # queued when it started
            batch.append(queue.popleft()[1])
        size = len(batch)
        want_s = self.cost_s(batch)
        pay_s = min(self.debt_s, want_s) if self.compensate else 0.0
        sleep_until(t_start + want_s - pay_s, self.spin_tail_s)
        take_delivered(self.pull, self.inbox)  # what arrived during the service: queued before it ended
        t_end = time.monotonic()
        self.debt_s += t_end - t_start - want_s
        self.busy_from = t_end if (queue or self.inbox) else None
        for req_id, load_id, _ in batch:
            self.push.send(encode_reply(req_id, load_id, t_start, t_end, size))
        self.served += size
        self.batches += 1
        self.busy_s += t_end - t_start
        self.overshoot_s += t_end - t_start - want_s
        return batch[-1][1]

    def counts(self) -> dict:
        return {
            "served": self.served,
            "dropped": self.dropped,
            "batches": self.batches,
            "busy_s": self.busy_s,
            "mean_overshoot_s": self.overshoot_s / max(self.batches, 1),
        }


def serve_client(comm, ctx: zmq.Context, **server: Any) -> dict:
    """Rank 0's side of a two-rank lab: a PULL socket for requests and a PUSH socket to rank 1's
    reply address (the addresses are exchanged over the communicator), then `run_batch_server`
    with the keyword arguments given, until rank 1 sends STOP."""
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)
    addresses = comm.allgather_obj(bind_random(pull))
    push.connect(addresses[1])
    stats = run_batch_server(
        pull, push, idle_timeout_s=comm.timeout_s, check_alive=comm.check_abort, **server
    )
    return {"ok": True, "role": "server", **stats}
