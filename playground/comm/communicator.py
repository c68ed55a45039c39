"""Tagged point-to-point messaging of numpy arrays between ranks, over ZeroMQ.

Each rank binds one PULL socket for data and lazily connects one PUSH socket to each peer it
sends to; high-water marks are off, so a send never blocks (a ring step cannot deadlock). ZeroMQ
keeps each sender's messages in order, which gives per-(peer, tag) ordering; arrivals for other
(peer, tag) pairs are parked until someone asks for them.

A message is a header frame (wire.py) and a payload frame: the array's bytes (zero-copy from
64 KiB up), or with the shared-memory data path a descriptor of where the bytes are (shm.py).
A receive blocks in zmq's recv with a short RCVTIMEO slice, never spinning (ranks often
outnumber cores); between slices it checks the deadline and the control socket, so when another
rank dies the launcher's abort reaches a blocked rank within one slice (PeerLost), not after the
timeout. When the message being waited for arrives and the caller gave an `out` array, its bytes
are received straight into it.

Not thread-safe: use a communicator from one thread at a time (a node may hand it to a
communication thread, as the overlap experiment does).
"""

import json
import math
import os
import signal
import time
from collections import defaultdict, deque

import numpy as np
import zmq

from playground.comm import wire
from playground.errors import CommTimeout, FaultInjected, PeerLost
from playground.trace import CAT_REDUCE, CAT_SEND, CAT_WAIT, Tracer

ZERO_COPY_MIN_BYTES = 64 * 1024  # below this, copying is cheaper than tracking a zero-copy frame
SOCKET_BUFFER_BYTES = 4 << 20  # kernel socket buffers: fewer wake-ups per large message (capped by net.core.*mem_max)
ZMQ_SEGMENT_BYTES = 1 << 20
SHM_SEGMENT_BYTES = 4 << 20
SLICE_MS = 100  # longest single blocking receive; abort and deadline are checked between slices

TAG_BARRIER = -1  # internal tags are negative; user tags are >= 0
TAG_OBJ = -2


class Request:
    """Handle of a non-blocking operation, like MPI.Request: `wait(timeout_s)` or `test()`."""

    def wait(self, timeout_s: float | None = None):
        raise NotImplementedError

    def test(self) -> bool:
        raise NotImplementedError


class _DoneRequest(Request):
    def wait(self, timeout_s=None):
        return None

    def test(self):
        return True


DONE = _DoneRequest()


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
                self.tracker.wait(min(SLICE_MS / 1000, max(0.0, deadline - time.monotonic())))
                return None
            except zmq.NotDone:
                self.comm.check_abort()
                if time.monotonic() >= deadline:
                    raise CommTimeout(self.comm.rank, "send completion to", self.peer, self.tag, timeout_s) from None


class _RecvRequest(Request):
    def __init__(self, comm: "Communicator", src: int, tag: int, out: np.ndarray | None):
        self.comm, self.src, self.tag, self.out = comm, src, tag, out

    def test(self):
        self.comm.drain()
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
        self.run_dir = None
        self._ctx, self._data, self._ctrl = ctx, data, ctrl
        data.setsockopt(zmq.RCVTIMEO, SLICE_MS)
        self._push: dict[int, zmq.Socket] = {}
        self._pending: dict[tuple[int, int], deque] = defaultdict(deque)
        self._fault = fault if fault is not None and fault.rank == rank else None
        self._num_ops = 0
        self.shm = None  # ShmChannels when the shared-memory data path is on
        self.shm_min_bytes = 1 << 62
        self.segment_bytes = ZMQ_SEGMENT_BYTES  # what collectives cut large buffers into by default
        self._large_min_bytes = ZERO_COPY_MIN_BYTES
        self.bytes_sent = 0
        self.bytes_received = 0
        self.messages_sent = 0  # data messages (one per segment), not counting JSON objects
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
            sock.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
            sock.connect(self.endpoints[dst])
            self._push[dst] = sock
        return sock

    def _count_op(self) -> None:
        """Fault drills only: the fault fires on this rank's operation number after_ops + 1."""
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
        if self._fault is not None:
            self._count_op()
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        t0 = time.monotonic_ns()
        sock = self._push.get(dst) or self._socket_to(dst)
        nbytes = x.nbytes
        req: Request = DONE
        if nbytes < self._large_min_bytes:  # small: header and bytes in one frame
            sock.send(wire.encode_inline(self.rank, tag, x))
        else:
            descriptor = self.shm.try_put(dst, x) if self.shm is not None and nbytes >= self.shm_min_bytes else None
            if descriptor is not None:
                sock.send(wire.encode_header(self.rank, tag, wire.KIND_SHM, x.dtype, x.shape), zmq.SNDMORE)
                sock.send(descriptor)
            else:
                sock.send(wire.encode_header(self.rank, tag, wire.KIND_ARRAY, x.dtype, x.shape), zmq.SNDMORE)
                req = _SendRequest(self, sock.send(x, copy=False, track=True), dst, tag)
        self.bytes_sent += nbytes
        self.messages_sent += 1
        if self.tracer.enabled:
            self.tracer.add_ns("send", CAT_SEND, t0, time.monotonic_ns(), dst, tag, nbytes)
        return req

    def isend_computed(self, dst: int, tag: int, count: int, dtype, fill) -> Request:
        """Send `count` elements of `dtype` that `fill(out)` writes straight into the outgoing buffer.

        On the shared-memory path `out` is the slot in the ring to `dst`, so a result computed for a
        peer (a reduction the ring forwards) is written once, where the peer reads it, instead of
        into a buffer and then copied into the ring. Otherwise `out` is a new array, sent as usual.
        """
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        if self.shm is not None and nbytes >= self.shm_min_bytes:
            got = self.shm.try_alloc(dst, nbytes)
            if got is not None:
                if self._fault is not None:
                    self._count_op()
                view, descriptor = got
                fill(view.view(dtype))
                t0 = time.monotonic_ns()
                sock = self._push.get(dst) or self._socket_to(dst)
                sock.send(wire.encode_header(self.rank, tag, wire.KIND_SHM, dtype, (count,)), zmq.SNDMORE)
                sock.send(descriptor)
                self.bytes_sent += nbytes
                self.messages_sent += 1
                if self.tracer.enabled:
                    self.tracer.add_ns("send", CAT_SEND, t0, time.monotonic_ns(), dst, tag, nbytes)
                return DONE
        out = np.empty(count, dtype)
        fill(out)
        return self.isend(out, dst, tag)

    def use_shm(self, channels, min_bytes: int) -> None:
        """Send arrays of at least `min_bytes` through shared memory (ZeroMQ carries descriptors)."""
        self.shm, self.shm_min_bytes = channels, min_bytes
        self._large_min_bytes = min(ZERO_COPY_MIN_BYTES, min_bytes)
        self.segment_bytes = SHM_SEGMENT_BYTES

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        self.isend(x, dst, tag).wait()

    # -- receiving -------------------------------------------------------------------------
    def check_abort(self, src: int | None = None, tag: int | None = None, op: str = "") -> None:
        """Raise PeerLost if the coordinator has told this rank to abort; name what it waited for."""
        if self._ctrl is not None and self._ctrl.poll(0):
            self._handle_ctrl()
        if self.aborted:
            if src is None:
                raise PeerLost(f"rank {self.rank}: aborted: {self.aborted}")
            exc = PeerLost(f"rank {self.rank}: aborted while waiting for {op} from rank {src} tag {tag}: "
                           f"{self.aborted}")
            exc.peer = src
            raise exc

    def _handle_ctrl(self) -> None:
        while True:
            try:
                msg = json.loads(self._ctrl.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                self.aborted = msg.get("reason", "the run was aborted")

    def _next_message(self, flags: int, want: tuple[int, int] | None = None, out: np.ndarray | None = None):
        """Receive one message (zmq.Again if none in this slice). When it is `want` and `out` fits,
        its bytes land in `out` and None is returned; otherwise it is parked in the pending queues."""
        first = self._data.recv(flags)
        src, tag, kind, dtype, shape = wire.decode_header(first)
        if kind == wire.KIND_INLINE:
            payload = memoryview(first)[wire.header_size(len(shape)):]
            if out is not None and (src, tag) == want and out.nbytes == len(payload) and out.dtype == dtype \
                    and out.flags.c_contiguous:
                if len(payload):
                    memoryview(out).cast("B")[:] = payload
                self.bytes_received += len(payload)
                return None
        elif kind == wire.KIND_ARRAY:
            nbytes = dtype.itemsize * math.prod(shape)
            if out is not None and (src, tag) == want and out.nbytes == nbytes and out.dtype == dtype \
                    and out.flags.c_contiguous:
                self._data.recv_into(out)
                self.bytes_received += nbytes
                return None
            payload = self._data.recv(copy=False)
        else:
            payload = self._data.recv()
        self._pending[(src, tag)].append((kind, dtype, shape, payload))
        return (src, tag)

    def drain(self) -> None:
        """Park every message that has already arrived (non-blocking)."""
        while True:
            try:
                self._next_message(zmq.NOBLOCK)
            except zmq.Again:
                return

    def _take(self, src: int, tag: int, op: str, timeout_s: float | None, out: np.ndarray | None = None):
        """The next message from (src, tag), waiting up to the timeout; None if it went into `out`."""
        key = (src, tag)
        q = self._pending.get(key)
        if q:
            return q.popleft()
        if not 0 <= src < self.size:
            raise ValueError(f"rank {self.rank}: source {src} is not a rank (world size {self.size})")
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic_ns()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                got = self._next_message(0, key, out)
            except zmq.Again:
                got = False
                self.check_abort(src, tag, op)
                if time.monotonic() >= deadline:
                    raise CommTimeout(self.rank, op, src, tag, timeout_s) from None
            if got is None or got == key:
                break
        if self.tracer.enabled:
            self.tracer.add_ns("recv_wait", CAT_WAIT, t0, time.monotonic_ns(), src, tag)
        return None if got is None else self._pending[key].popleft()

    def _array_of(self, src: int, msg) -> tuple[np.ndarray, int | None]:
        """(read-only array view, shm release token or None) of a parked message."""
        kind, dtype, shape, payload = msg
        if kind == wire.KIND_SHM:
            raw, end = self.shm.arrived(src, payload)
            return raw.view(dtype).reshape(shape), end
        if kind == wire.KIND_INLINE:
            arr = np.frombuffer(payload, dtype=dtype)
            return (arr if len(shape) == 1 else arr.reshape(shape)), None
        if kind != wire.KIND_ARRAY:
            raise ValueError(f"rank {self.rank}: expected an array from rank {src}, got message kind {kind}")
        buf = payload.buffer
        return np.frombuffer(buf, dtype=dtype).reshape(shape), None

    def recv(self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None) -> np.ndarray:
        """The next array from `src` with `tag`. Without `out`: a read-only array (zero-copy over ZeroMQ)."""
        msg = self._take(src, tag, "recv", timeout_s, out)
        if msg is None:
            return out
        arr, token = self._array_of(src, msg)
        self.bytes_received += arr.nbytes
        if token is not None:  # bytes in shared memory: copy out, then hand the space back
            result = arr.copy() if out is None else _copy_into(out, arr)
            self.shm.release(src, token)
            return result
        return arr if out is None else _copy_into(out, arr)

    def recv_reduce(self, src: int, tag: int, target: np.ndarray, ufunc=None, base: np.ndarray | None = None) -> int:
        """Receive from (src, tag) straight into `target`: target = ufunc(base, message) (base defaults
        to target itself), or a copy when ufunc is None. Returns the element count received."""
        msg = self._take(src, tag, "recv", None, target if ufunc is None else None)
        if msg is None:
            return target.size
        arr, token = self._array_of(src, msg)
        self.bytes_received += arr.nbytes
        if arr.size == target.size:
            if ufunc is None:
                np.copyto(target, arr.reshape(target.shape), casting="no")
            else:
                t0 = time.monotonic_ns()
                ufunc(target if base is None else base, arr.reshape(target.shape), out=target)
                if self.tracer.enabled:
                    self.tracer.add_ns("reduce", CAT_REDUCE, t0, time.monotonic_ns(), src, arr.nbytes)
        if token is not None:
            self.shm.release(src, token)
        return arr.size

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
        sock = self._socket_to(dst)
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_JSON, np.dtype("u1"), ()), zmq.SNDMORE)
        sock.send(json.dumps(obj).encode())

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        kind, _, _, payload = self._take(src, tag, "recv_obj", timeout_s)
        if kind != wire.KIND_JSON:
            raise ValueError(f"rank {self.rank}: expected an object from rank {src} tag {tag}, got kind {kind}")
        return json.loads(payload if isinstance(payload, bytes) else payload.bytes)

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
        self._pending.clear()
        if self.shm is not None:
            self.shm.close()


def _copy_into(out: np.ndarray, arr: np.ndarray) -> np.ndarray:
    target = out.reshape(arr.shape) if out.shape != arr.shape and out.size == arr.size else out
    np.copyto(target, arr, casting="no")
    return out
