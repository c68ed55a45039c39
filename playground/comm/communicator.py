"""Tagged point-to-point messaging of numpy arrays between ranks, over ZeroMQ.

Each rank binds one PULL socket for data and lazily connects one PUSH socket to each peer it
sends to; high-water marks are off, so a send never blocks (a ring step cannot deadlock). ZeroMQ
keeps each sender's messages in order, which gives per-(peer, tag) ordering; arrivals for other
(peer, tag) pairs are parked until someone asks for them.

Every wait polls the data socket *and* the control socket to the coordinator, so when any rank
dies the launcher's abort reaches a blocked rank at once (PeerLost), not after the timeout.
Waits block in the kernel (zmq poll), never spin: ranks often outnumber cores here.

Not thread-safe: use a communicator from one thread at a time (a node may hand it to a
communication thread, as the overlap experiment does).
"""

import json
import os
import signal
import time
from collections import defaultdict, deque

import numpy as np
import zmq

from playground.comm import wire
from playground.errors import CommTimeout, FaultInjected, PeerLost
from playground.trace import CAT_SEND, CAT_WAIT, Tracer

ZERO_COPY_MIN_BYTES = 64 * 1024  # below this, copying is cheaper than tracking a zero-copy frame
_SLICE_MS = 200  # longest single poll; between slices the deadline is re-checked

TAG_BARRIER = -1  # internal tags are negative; user tags are >= 0
TAG_OBJ = -2


class Request:
    """Handle of a non-blocking operation, like MPI.Request: `wait(timeout_s)` or `test()`."""

    def wait(self, timeout_s: float | None = None):
        raise NotImplementedError

    def test(self) -> bool:
        raise NotImplementedError


class _DoneRequest(Request):
    def __init__(self, value=None):
        self.value = value

    def wait(self, timeout_s=None):
        return self.value

    def test(self):
        return True


class _SendRequest(Request):
    def __init__(self, comm: "Communicator", tracker: zmq.MessageTracker, peer: int, tag: int):
        self.comm, self.tracker, self.peer, self.tag = comm, tracker, peer, tag

    def test(self):
        return self.tracker.done

    def wait(self, timeout_s=None):
        if self.tracker.done:
            return None
        timeout_s = self.comm.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.tracker.wait(min(_SLICE_MS / 1000, max(0.0, deadline - time.monotonic())))
                return None
            except zmq.NotDone:
                self.comm.check_abort()
                if time.monotonic() >= deadline:
                    raise CommTimeout(self.comm.rank, "send completion to", self.peer, self.tag, timeout_s) from None


class _RecvRequest(Request):
    def __init__(self, comm: "Communicator", src: int, tag: int, out: np.ndarray | None):
        self.comm, self.src, self.tag, self.out = comm, src, tag, out

    def test(self):
        self.comm.poll(0)
        return bool(self.comm._pending.get((self.src, self.tag)))

    def wait(self, timeout_s=None):
        return self.comm.recv(self.src, self.tag, out=self.out, timeout_s=timeout_s)


class Communicator:
    """One rank's view of the world: `rank`, `size`, send/recv/isend/irecv/sendrecv, barrier."""

    def __init__(self, rank: int, size: int, ctx: zmq.Context, data: zmq.Socket, ctrl: zmq.Socket | None,
                 endpoints: list[str], tracer: Tracer, timeout_s: float = 30.0, fault=None):
        self.rank, self.size = rank, size
        self.tracer = tracer
        self.timeout_s = timeout_s
        self.endpoints = endpoints
        self._ctx, self._data, self._ctrl = ctx, data, ctrl
        self._push: dict[int, zmq.Socket] = {}
        self._pending: dict[tuple[int, int], deque] = defaultdict(deque)
        self._poller = zmq.Poller()
        self._poller.register(data, zmq.POLLIN)
        if ctrl is not None:
            self._poller.register(ctrl, zmq.POLLIN)
        self._fault = fault
        self._num_ops = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.aborted: str | None = None

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size})"

    # -- sending ---------------------------------------------------------------------------
    def _socket_to(self, dst: int) -> zmq.Socket:
        sock = self._push.get(dst)
        if sock is None:
            if not 0 <= dst < self.size:
                raise ValueError(f"rank {self.rank}: destination {dst} is not a rank (world size {self.size})")
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.endpoints[dst])
            self._push[dst] = sock
        return sock

    def _count_op(self) -> None:
        self._num_ops += 1
        f = self._fault
        if f is not None and f.rank == self.rank and self._num_ops > f.after_ops:
            self._fault = None
            if f.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if f.action == "exit":
                os._exit(3)
            if f.action == "hang":
                while True:
                    time.sleep(3600)
            raise FaultInjected(f"rank {self.rank}: injected fault after {f.after_ops} operations")

    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Request:
        """Start sending `x`; do not modify `x` until the request completes (it may go zero-copy)."""
        self._count_op()
        x = np.ascontiguousarray(x)
        t0 = time.monotonic_ns()
        header = wire.encode_header(self.rank, tag, wire.KIND_ARRAY, x.dtype, x.shape)
        sock = self._socket_to(dst)
        if x.nbytes >= ZERO_COPY_MIN_BYTES:
            tracker = sock.send_multipart([header, x], copy=False, track=True)
            req: Request = _SendRequest(self, tracker, dst, tag)
        else:
            sock.send_multipart([header, x.data])
            req = _DoneRequest()
        self.bytes_sent += x.nbytes
        if self.tracer.enabled:
            self.tracer.add("send", CAT_SEND, t0 / 1000, (time.monotonic_ns() - t0) / 1000,
                            {"peer": dst, "tag": tag, "bytes": x.nbytes})
        return req

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        self.isend(x, dst, tag).wait()

    # -- receiving -------------------------------------------------------------------------
    def check_abort(self) -> None:
        """Raise PeerLost if the coordinator has told this rank to abort."""
        if self._ctrl is not None and self._ctrl.poll(0):
            self._handle_ctrl()
        if self.aborted:
            raise PeerLost(f"rank {self.rank}: aborted: {self.aborted}")

    def _handle_ctrl(self) -> None:
        while True:
            try:
                msg = json.loads(self._ctrl.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                self.aborted = msg.get("reason", "the run was aborted")

    def poll(self, timeout_ms: int) -> None:
        """Move every arrived message into the pending queues; wait at most `timeout_ms`."""
        events = dict(self._poller.poll(timeout_ms))
        if self._ctrl is not None and self._ctrl in events:
            self._handle_ctrl()
        if self._data in events:
            while True:
                try:
                    frames = self._data.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                src, tag, kind, dtype, shape = wire.decode_header(frames[0].bytes)
                self._pending[(src, tag)].append((kind, dtype, shape, frames[1]))

    def _take(self, src: int, tag: int, op: str, timeout_s: float | None):
        q = self._pending.get((src, tag))
        if q:
            return q.popleft()
        if not 0 <= src < self.size:
            raise ValueError(f"rank {self.rank}: source {src} is not a rank (world size {self.size})")
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic_ns()
        deadline = time.monotonic() + timeout_s
        while not q:
            if self.aborted:
                exc = PeerLost(f"rank {self.rank}: aborted while waiting for {op} from rank {src} tag {tag}: "
                               f"{self.aborted}")
                exc.peer = src
                raise exc
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeout(self.rank, op, src, tag, timeout_s)
            self.poll(min(_SLICE_MS, max(1, int(left * 1000))))
            q = self._pending.get((src, tag))
        if self.tracer.enabled:
            self.tracer.add("recv_wait", CAT_WAIT, t0 / 1000, (time.monotonic_ns() - t0) / 1000,
                            {"peer": src, "tag": tag})
        return q.popleft()

    def recv(self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None) -> np.ndarray:
        """The next array from `src` with `tag`. Without `out`, a read-only zero-copy view."""
        kind, dtype, shape, frame = self._take(src, tag, "recv", timeout_s)
        if kind != wire.KIND_ARRAY:
            raise ValueError(f"rank {self.rank}: expected an array from rank {src} tag {tag}, got kind {kind}")
        arr = np.frombuffer(frame.buffer, dtype=dtype).reshape(shape)
        self.bytes_received += arr.nbytes
        if out is None:
            return arr
        if out.shape != arr.shape and out.size == arr.size:
            out = out.reshape(arr.shape)
        np.copyto(out, arr, casting="no")
        return out

    def irecv(self, src: int, tag: int = 0, out: np.ndarray | None = None) -> Request:
        return _RecvRequest(self, src, tag, out)

    def sendrecv(self, x: np.ndarray, dst: int, src: int, tag: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        req = self.isend(x, dst, tag)
        y = self.recv(src, tag, out=out)
        req.wait()
        return y

    # -- small JSON objects and synchronisation --------------------------------------------
    def send_obj(self, obj, dst: int, tag: int = 0) -> None:
        """Send a small JSON-able object (control data, never bulk arrays)."""
        self._count_op()
        header = wire.encode_header(self.rank, tag, wire.KIND_JSON, np.dtype("u1"), ())
        self._socket_to(dst).send_multipart([header, json.dumps(obj).encode()])

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        kind, _, _, frame = self._take(src, tag, "recv_obj", timeout_s)
        if kind != wire.KIND_JSON:
            raise ValueError(f"rank {self.rank}: expected an object from rank {src} tag {tag}, got kind {kind}")
        return json.loads(frame.bytes)

    def bcast_obj(self, obj=None, root: int = 0):
        if self.rank == root:
            for r in range(self.size):
                if r != root:
                    self.send_obj(obj, r, TAG_OBJ)
            return obj
        return self.recv_obj(root, TAG_OBJ)

    def allgather_obj(self, obj) -> list:
        for r in range(self.size):
            if r != self.rank:
                self.send_obj(obj, r, TAG_OBJ)
        return [obj if r == self.rank else self.recv_obj(r, TAG_OBJ) for r in range(self.size)]

    def barrier(self, timeout_s: float | None = None) -> None:
        """Dissemination barrier: ceil(log2 N) rounds of empty messages, no coordinator involved."""
        empty = np.empty(0, dtype=np.uint8)
        dist = 1
        while dist < self.size:
            self.isend(empty, (self.rank + dist) % self.size, TAG_BARRIER)
            self._take((self.rank - dist) % self.size, TAG_BARRIER, "barrier", timeout_s)
            dist *= 2

    # -- launcher services -----------------------------------------------------------------
    def progress(self, done: int, total: int, label: str = "") -> None:
        """Advance the launcher's progress bar (only rank 0's reports are shown)."""
        if self._ctrl is not None and self.rank == 0:
            self._ctrl.send(json.dumps({"type": "progress", "done": done, "total": total, "label": label}).encode())

    def close(self) -> None:
        for sock in self._push.values():
            sock.close(linger=0)
        self._push.clear()
