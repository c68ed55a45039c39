"""Tagged point-to-point messaging of numpy arrays between ranks, over ZeroMQ.

Each rank binds one PULL socket for data and lazily connects one PUSH socket to each peer it
sends to; high-water marks are off, so a send never blocks (a ring step cannot deadlock). ZeroMQ
keeps each sender's messages in order, which gives per-(peer, tag) ordering; arrivals for other
(peer, tag) pairs are parked until someone asks for them.

A message is a header frame (wire.py) and a payload frame: the array's bytes (zero-copy from
64 KiB up). With the shared-memory data path on one host (`use_shm`), ZeroMQ is bypassed: large
arrays go through /dev/shm rings (shm.py) and each message, as one record of header and inline
bytes or ring descriptor, through the receiver's named pipe (pipes.py), which wakes it directly.
A receive blocks (in zmq's recv with a short RCVTIMEO slice, or in poll on the pipe) and never
spins for long (ranks often outnumber cores); between slices it checks the deadline and the
control socket, so when another rank dies the launcher's abort reaches a blocked rank within one
slice (PeerLost), not after the timeout. When the message being waited for arrives and the caller
gave an `out` array, its bytes are received straight into it.

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

from playground.comm import pipes, wire
from playground.errors import CommTimeout, FaultInjected, InvalidPeer, PeerLost
from playground.trace import CAT_REDUCE, CAT_SEND, CAT_WAIT, Tracer

ZERO_COPY_MIN_BYTES = 64 * 1024  # below this, copying is cheaper than tracking a zero-copy frame
SOCKET_BUFFER_BYTES = (
    4 << 20
)  # kernel socket buffers: fewer wake-ups per large message (capped by net.core.*mem_max)
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
                    raise CommTimeout(
                        self.comm.rank, "send completion to", self.peer, self.tag, timeout_s
                    ) from None


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

    def __init__(
        self,
        rank: int,
        size: int,
        ctx: zmq.Context,
        data: zmq.Socket,
        ctrl: zmq.Socket | None,
        endpoints: list[str],
        tracer: Tracer,
        timeout_s: float = 30.0,
        fault=None,
    ):
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
        self.pipes = None  # and the Inboxes that carry its messages
        self.shm_min_bytes = 1 << 62
        self.segment_bytes = ZMQ_SEGMENT_BYTES  # what collectives cut large buffers into by default
        self.bytes_sent = 0
        self.bytes_received = 0
        self.aborted: str | None = None

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size})"

    # -- sending ---------------------------------------------------------------------------
    def _socket_to(self, dst: int) -> zmq.Socket:
        sock = self._push.get(dst)
        if sock is None:
            self._check_peer(dst, "destination")
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
            sock.connect(self.endpoints[dst])
            self._push[dst] = sock
        return sock

    def _check_peer(self, peer: int, role: str) -> None:
        if not 0 <= peer < self.size:
            raise InvalidPeer(self.rank, peer, role, self.size)

    def _count_op(self, array: bool = False) -> bool:
        """Fault drills only: the fault fires on this rank's operation number after_ops + 1 (for
        `corrupt`, on the first array send from there: True means flip a bit of this message)."""
        self._num_ops += 1
        f = self._fault
        if f is not None and f.rank == self.rank and self._num_ops > f.after_ops:
            if f.action == "corrupt":
                if array:
                    self._fault = None
                return array
            self._fault = None
            if f.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if f.action == "exit":
                os._exit(3)
            if f.action == "hang":
                while True:
                    time.sleep(3600)
            raise FaultInjected(self.rank, f.after_ops)
        return False

    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Request:
        """Start sending `x`; do not modify `x` until the request completes (it may go zero-copy)."""
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if self._fault is not None and self._count_op(array=x.nbytes > 0):
            x = x.copy()
            x.reshape(-1).view(np.uint8)[0] ^= 1
        t0 = time.monotonic_ns()
        nbytes = x.nbytes
        req: Request = DONE
        if self.pipes is not None:
            self._check_peer(dst, "destination")
            if self._inline_fits(nbytes, x.ndim):
                self._post(dst, tag, wire.encode_inline(self.rank, tag, x))
            else:
                view, descriptor = self._ring_slot(dst, tag, nbytes)
                np.copyto(view, x.reshape(-1).view(np.uint8))
                self._post(
                    dst, tag, wire.encode_header(self.rank, tag, wire.KIND_SHM, x.dtype, x.shape) + descriptor
                )
        else:
            sock = self._push.get(dst) or self._socket_to(dst)
            if nbytes < ZERO_COPY_MIN_BYTES:  # small: header and bytes in one frame
                sock.send(wire.encode_inline(self.rank, tag, x))
            else:
                sock.send(wire.encode_header(self.rank, tag, wire.KIND_ARRAY, x.dtype, x.shape), zmq.SNDMORE)
                req = _SendRequest(self, sock.send(x, copy=False, track=True), dst, tag)
        self.bytes_sent += nbytes
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
        if self.pipes is not None and not self._inline_fits(nbytes, 1):
            corrupt = self._fault is not None and self._count_op(array=nbytes > 0)
            view, descriptor = self._ring_slot(dst, tag, nbytes)
            fill(view.view(dtype))
            if corrupt:
                view[0] ^= 1
            t0 = time.monotonic_ns()
            self._post(
                dst, tag, wire.encode_header(self.rank, tag, wire.KIND_SHM, dtype, (count,)) + descriptor
            )
            self.bytes_sent += nbytes
            if self.tracer.enabled:
                self.tracer.add_ns("send", CAT_SEND, t0, time.monotonic_ns(), dst, tag, nbytes)
            return DONE
        out = np.empty(count, dtype)
        fill(out)
        return self.isend(out, dst, tag)

    def use_shm(self, channels, inboxes, min_bytes: int) -> None:
        """Bypass ZeroMQ on one host: arrays of at least `min_bytes` (or too large for one pipe
        record) go through shared-memory rings, every message through the peers' pipes."""
        self.shm, self.pipes, self.shm_min_bytes = channels, inboxes, min_bytes
        self.segment_bytes = SHM_SEGMENT_BYTES

    def _inline_fits(self, nbytes: int, ndim: int) -> bool:
        """On the pipe path: do an array's bytes travel in its record (else in the shm ring)?"""
        return nbytes < self.shm_min_bytes and nbytes <= pipes.MAX_RECORD - wire.header_size(ndim)

    def _post(self, dst: int, tag: int, record: bytes) -> None:
        """Put a record in `dst`'s pipe, waiting while it is full (or not open yet)."""
        if not self.pipes.try_send(dst, record):
            self._wait_for_room(dst, tag, "its pipe", lambda: self.pipes.try_send(dst, record))

    def _ring_slot(self, dst: int, tag: int, nbytes: int) -> tuple[np.ndarray, bytes]:
        """(writable byte view, descriptor) of space in the ring to `dst`, waiting while it is full."""
        got = self.shm.try_alloc(dst, nbytes)
        if got is None:
            got = self._wait_for_room(
                dst, tag, "the shared-memory ring to it", lambda: self.shm.try_alloc(dst, nbytes)
            )
        return got

    def _wait_for_room(self, dst: int, tag: int, where: str, attempt):
        """Retry `attempt` until it returns something true, and return that; meanwhile take in (and
        copy out of shared memory) everything that arrives, so ranks flooding each other all progress."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._copy_out_parked()
            got = attempt()
            if got:
                return got
            self.check_abort()
            if time.monotonic() >= deadline:
                raise CommTimeout(
                    self.rank,
                    "send",
                    dst,
                    tag,
                    self.timeout_s,
                    what=f"room to send to rank {dst} (tag {tag}) in {where}",
                    direction="to",
                )
            self._next_message(1)  # the peer makes room by receiving, unannounced: look again in 1 ms

    def _copy_out_parked(self) -> None:
        """Drain the pipe and move parked shared-memory messages into private memory, releasing
        their ring space to the senders."""
        self.drain()
        for (src, _), q in self._pending.items():
            for i, (kind, dtype, shape, payload) in enumerate(q):
                if kind in (wire.KIND_SHM, wire.KIND_JSON_SHM):
                    view, end = payload
                    q[i] = (
                        wire.KIND_ARRAY if kind == wire.KIND_SHM else wire.KIND_JSON,
                        dtype,
                        shape,
                        view.tobytes(),
                    )
                    self.shm.release(src, end)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        self.isend(x, dst, tag).wait()

    # -- receiving -------------------------------------------------------------------------
    def check_abort(self, src: int | None = None, tag: int | None = None, op: str = "") -> None:
        """Raise PeerLost if the coordinator has told this rank to abort; name what it waited for."""
        if self._ctrl is not None and self._ctrl.poll(0):
            self._handle_ctrl()
        if self.aborted:
            raise PeerLost(self.rank, self.aborted, peer=src, tag=tag, op=op)

    def _handle_ctrl(self) -> None:
        while True:
            try:
                msg = json.loads(self._ctrl.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                self.aborted = msg.get("reason", "the run was aborted")

    def _next_message(
        self, timeout_ms: int, want: tuple[int, int] | None = None, out: np.ndarray | None = None
    ):
        """Receive one message, waiting up to `timeout_ms`; False if none came. When it is `want` and
        `out` fits, its bytes land in `out` and None is returned; otherwise it is parked in the
        pending queues and its (src, tag) returned."""
        if self.pipes is not None:
            return self._next_record(timeout_ms, want, out)
        try:
            if timeout_ms == SLICE_MS:  # the socket's RCVTIMEO
                first = self._data.recv(0)
            elif timeout_ms <= 0 or self._data.poll(timeout_ms):
                first = self._data.recv(zmq.NOBLOCK)
            else:
                return False
        except zmq.Again:
            return False
        src, tag, kind, dtype, shape = wire.decode_header(first)
        if kind == wire.KIND_INLINE:
            payload = memoryview(first)[wire.header_size(len(shape)) :]
            if _fits(out, (src, tag) == want, dtype, len(payload)):
                return self._inline_into(out, payload)
        elif kind == wire.KIND_ARRAY:
            nbytes = dtype.itemsize * math.prod(shape)
            if _fits(out, (src, tag) == want, dtype, nbytes):
                self._data.recv_into(out)
                self.bytes_received += nbytes
                return None
            payload = self._data.recv(copy=False)
        else:
            payload = self._data.recv()
        self._pending[(src, tag)].append((kind, dtype, shape, payload))
        return (src, tag)

    def _next_record(self, timeout_ms: int, want, out):
        record = self.pipes.next_record(timeout_ms)
        if record is None:
            return False
        src, tag, kind, dtype, shape, payload = wire.decode_record(record)
        if kind in (wire.KIND_SHM, wire.KIND_JSON_SHM):
            # Registered on arrival: ring space is handed back in arrival order, whatever the tag.
            view, end = self.shm.arrived(src, payload)
            if kind == wire.KIND_SHM and _fits(out, (src, tag) == want, dtype, view.nbytes):
                np.copyto(out.reshape(-1).view(np.uint8), view)
                self.shm.release(src, end)
                self.bytes_received += view.nbytes
                return None
            payload = (view, end)
        elif kind == wire.KIND_INLINE:
            if _fits(out, (src, tag) == want, dtype, len(payload)):
                return self._inline_into(out, payload)
        elif kind == wire.KIND_JSON:
            payload = payload.tobytes()
        self._pending[(src, tag)].append((kind, dtype, shape, payload))
        return (src, tag)

    def _inline_into(self, out: np.ndarray, payload: memoryview) -> None:
        if len(payload):
            memoryview(out).cast("B")[:] = payload
        self.bytes_received += len(payload)

    def drain(self) -> None:
        """Park every message that has already arrived (non-blocking)."""
        while self._next_message(0) is not False:
            pass

    def _take(self, src: int, tag: int, op: str, timeout_s: float | None, out: np.ndarray | None = None):
        """The next message from (src, tag), waiting up to the timeout; None if it went into `out`."""
        key = (src, tag)
        q = self._pending.get(key)
        if q:
            return q.popleft()
        self._check_peer(src, "source")
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic_ns()
        deadline = time.monotonic() + timeout_s
        while True:
            got = self._next_message(SLICE_MS, key, out)
            if got is None or got == key:
                break
            if got is False:
                self.check_abort(src, tag, op)
                if time.monotonic() >= deadline:
                    raise CommTimeout(self.rank, op, src, tag, timeout_s) from None
        if self.tracer.enabled:
            self.tracer.add_ns("recv_wait", CAT_WAIT, t0, time.monotonic_ns(), src, tag)
        return None if got is None else self._pending[key].popleft()

    def _array_of(self, src: int, msg) -> tuple[np.ndarray, int | None]:
        """(read-only array view, shm release token or None) of a parked message."""
        kind, dtype, shape, payload = msg
        if kind == wire.KIND_SHM:
            raw, end = payload
            return raw.view(dtype).reshape(shape), end
        if kind == wire.KIND_INLINE:
            arr = np.frombuffer(payload, dtype=dtype)
            return (arr if len(shape) == 1 else arr.reshape(shape)), None
        if kind != wire.KIND_ARRAY:
            raise ValueError(f"rank {self.rank}: expected an array from rank {src}, got message kind {kind}")
        buf = payload.buffer if isinstance(payload, zmq.Frame) else payload
        return np.frombuffer(buf, dtype=dtype).reshape(shape), None

    def recv(
        self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None
    ) -> np.ndarray:
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

    def recv_reduce(
        self, src: int, tag: int, target: np.ndarray, ufunc=None, base: np.ndarray | None = None
    ) -> int:
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

    def sendrecv(
        self, x: np.ndarray, dst: int, src: int, tag: int = 0, out: np.ndarray | None = None
    ) -> np.ndarray:
        req = self.isend(x, dst, tag)
        y = self.recv(src, tag, out=out)
        req.wait()
        return y

    # -- small JSON objects and synchronisation --------------------------------------------
    def send_obj(self, obj, dst: int, tag: int = 0) -> None:
        """Send a small JSON-able object (control data, never bulk arrays)."""
        self._count_op()
        body = json.dumps(obj).encode()
        u1 = np.dtype("u1")
        if self.pipes is not None:
            self._check_peer(dst, "destination")
            header = wire.encode_header(self.rank, tag, wire.KIND_JSON, u1, ())
            if len(header) + len(body) <= pipes.MAX_RECORD:
                self._post(dst, tag, header + body)
                return
            view, descriptor = self._ring_slot(dst, tag, len(body))
            view[:] = np.frombuffer(body, dtype=np.uint8)
            self._post(dst, tag, wire.encode_header(self.rank, tag, wire.KIND_JSON_SHM, u1, ()) + descriptor)
            return
        sock = self._socket_to(dst)
        sock.send(wire.encode_header(self.rank, tag, wire.KIND_JSON, u1, ()), zmq.SNDMORE)
        sock.send(body)

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        kind, _, _, payload = self._take(src, tag, "recv_obj", timeout_s)
        if kind == wire.KIND_JSON_SHM:
            view, end = payload
            body = view.tobytes()
            self.shm.release(src, end)
            return json.loads(body)
        if kind != wire.KIND_JSON:
            raise ValueError(
                f"rank {self.rank}: expected an object from rank {src} tag {tag}, got kind {kind}"
            )
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
            self._ctrl.send(
                json.dumps({"type": "progress", "done": done, "total": total, "label": label}).encode()
            )

    def close(self) -> None:
        for sock in self._push.values():
            sock.close(linger=0)
        self._push.clear()
        self._pending.clear()
        if self.shm is not None:
            self.shm.close()
        if self.pipes is not None:
            self.pipes.close()


def _fits(out: np.ndarray | None, wanted: bool, dtype: np.dtype, nbytes: int) -> bool:
    """Can the awaited message's bytes go straight into the caller's `out`?"""
    return (
        wanted and out is not None and out.nbytes == nbytes and out.dtype == dtype and out.flags.c_contiguous
    )


def _copy_into(out: np.ndarray, arr: np.ndarray) -> np.ndarray:
    target = out.reshape(arr.shape) if out.shape != arr.shape and out.size == arr.size else out
    np.copyto(target, arr, casting="no")
    return out
