"""Open-loop load generation over ZeroMQ: arrivals never wait for replies.

A closed-loop client (send, wait, send) can never overload a server and hides queueing: the
lecture's curves need an *open* stream, Poisson arrivals at a set rate whatever the replies do.
So `OpenLoopClient` sends from the calling thread at scheduled times on its own PUSH socket,
while a receiver thread owns a PULL socket and timestamps replies (ZeroMQ sockets are not
thread-safe: one socket, one thread). Both run on the host's CLOCK_MONOTONIC, the same clock
the server stamps with, so client and server timestamps can be subtracted.

Wire format (fixed-size structs, no pickle):
  request  "<iid":   req_id, load_id, value   (value: service seconds or max batch size)
  reply    "<iiddi": req_id, load_id, t_start_s, t_end_s, batch_size
A request with req_id < 0 is a control message: ABORT (drop what is queued for load_id, then
reply once with req_id ABORT) or STOP (the server exits its loop).
"""

import struct
import threading
import time

import numpy as np
import zmq

from playground.core.errors import LabError, UsageError
from playground.core.machine import set_timer_slack_ns, sleep_until

REQUEST = struct.Struct("<iid")
REPLY = struct.Struct("<iiddi")
ABORT = -1
STOP = -2


def run_server_and_client(comm, params, serve, load):
    """Rank 0 runs `serve(comm, ctx, params)`, rank 1 `load(...)`, each with its own ZeroMQ context
    (the measured data path, apart from the communicator's) and 1 us timer slack."""
    set_timer_slack_ns(1)
    ctx = zmq.Context()
    try:
        return (serve if comm.rank == 0 else load)(comm, ctx, params)
    finally:
        ctx.destroy(linger=0)


def encode_request(req_id: int, load_id: int, value: float) -> bytes:
    return REQUEST.pack(req_id, load_id, value)


def decode_request(buf: bytes) -> tuple[int, int, float]:
    return REQUEST.unpack(buf)


def encode_reply(req_id: int, load_id: int, t_start_s: float, t_end_s: float, batch_size: int) -> bytes:
    return REPLY.pack(req_id, load_id, t_start_s, t_end_s, batch_size)


def decode_reply(buf: bytes) -> tuple[int, int, float, float, int]:
    return REPLY.unpack(buf)


def poisson_arrivals_s(rate_per_s: float, num: int, rng: np.random.Generator) -> np.ndarray:
    """Offsets of `num` Poisson arrivals: cumulative exponential gaps with mean 1 / rate."""
    return np.cumsum(rng.exponential(1.0 / rate_per_s, num))


def service_times_s(mean_s: float, num: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Per-request service demand: exponential (M/M/1) or fixed (M/D/1)."""
    if kind == "fixed":
        return np.full(num, mean_s)
    if kind == "exponential":
        return rng.exponential(mean_s, num)
    raise UsageError(f"expected 'exponential' or 'fixed', got {kind!r}", field="service")


def bind_random(sock: zmq.Socket) -> str:
    sock.bind("tcp://127.0.0.1:*")
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


class OpenLoopClient:
    """Sends requests on a schedule and collects replies on a separate thread.

    Per request it keeps t_send_s (stamped just before the send), and from the reply
    t_start_s / t_end_s (server clock) and t_recv_s (stamped as the reply arrives).
    """

    def __init__(self, ctx: zmq.Context, capacity: int):
        self.push = ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.setsockopt(zmq.SNDHWM, 0)
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.reply_address = bind_random(self.pull)
        self.t_send_s = np.full(capacity, np.nan)
        self.t_start_s = np.full(capacity, np.nan)
        self.t_end_s = np.full(capacity, np.nan)
        self.t_recv_s = np.full(capacity, np.nan)
        self.batch_size = np.zeros(capacity, dtype=np.int64)
        self._cond = threading.Condition()
        self._received = 0
        self._acks: set[int] = set()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._receive_loop, name="replies", daemon=True)

    def connect(self, server_address: str) -> None:
        self.push.connect(server_address)
        self._thread.start()  # the PULL socket belongs to the receiver thread from here on

    def _receive_loop(self) -> None:
        set_timer_slack_ns(1)
        poller = zmq.Poller()
        poller.register(self.pull, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(100):
                    continue
                while True:
                    try:
                        buf = self.pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    t = time.monotonic()
                    req_id, load_id, t_start, t_end, batch = decode_reply(buf)
                    with self._cond:
                        if req_id == ABORT:
                            self._acks.add(load_id)
                        else:
                            self.t_recv_s[req_id] = t
                            self.t_start_s[req_id] = t_start
                            self.t_end_s[req_id] = t_end
                            self.batch_size[req_id] = batch
                            self._received += 1
                        self._cond.notify_all()
        except BaseException as e:  # surfaced by the next wait in the sending thread
            self._error = e
            with self._cond:
                self._cond.notify_all()
        finally:
            self.pull.close(0)

    def send_at(self, deadline_s: float, req_id: int, load_id: int, value: float) -> float:
        """Send one request at (or as soon after as possible) `deadline_s`; returns the lateness."""
        sleep_until(deadline_s)
        t = time.monotonic()
        self.t_send_s[req_id] = t
        self.push.send(encode_request(req_id, load_id, value))
        return t - deadline_s

    def send_control(self, kind: int, load_id: int) -> None:
        self.push.send(encode_request(kind, load_id, 0.0))

    def wait_received(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` replies in all have arrived; False when `timeout_s` ran out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._received < count and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        if self._error is not None:
            raise LabError(f"reply receiver failed: {self._error}", step="reply receiver")
        return True

    def wait_ack(self, load_id: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while load_id not in self._acks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    @property
    def received(self) -> int:
        with self._cond:
            return self._received

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self.push.close(0)
