"""Tagged point-to-point messaging of numpy arrays between ranks, over any `Transport`.

The communicator is what a node and the collectives see; the transport below it only moves
messages (transport.py). Here live the parts every transport shares:
- matching: a receive asks for (source, tag); messages for other pairs that arrive first are
  parked until someone asks for them, so per-(source, tag) order is the posting order;
- deadlines: every blocking wait has a timeout and names what it waited for (CommTimeout);
- aborts: waits sleep in slices of SLICE_MS and between them ask the launcher whether another rank
  failed, so a dead peer becomes PeerLost within a slice, not after the timeout;
- back-pressure: a post that finds no room (a full pipe or ring) waits while taking in what
  arrives, so ranks that flood each other all progress;
- object messages (small JSON values, never pickle) and barrier (objects.py), progress, tracing:
  when the tracer records messages, every send and every receive (a zero-length `recv_wait` when
  the message was already parked) carries `seq`, its number among the messages from its sender to
  its receiver on its tag, so `inspect --trace` can draw each message from its send to its receive.
- the record of the collective running and each rank's host, quoted by errors, and the flight
  recorder's ring of the last operations (oprecord.py, flight.py);
- matched collectives: their fingerprint travels in their tags (optags.py), and a receive that has to
  wait looks for a peer that called another collective (desync.py).
Every message leaves through one path, `_post`: the range check, the post, the wait for room and
the trace event are written once, for an array, a computed array and an object alike. Not
thread-safe: use it from one thread at a time (a node may hand it to a communication thread).
"""

import itertools
import operator
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, Literal

import numpy as np
from _playground_native import CommCore, configure_comm

from playground.comm import flight
from playground.comm.control import LauncherServices
from playground.comm.desync import DesyncCheck
from playground.comm.objects import TAG_BARRIER, TAG_OBJ, ObjectMessages
from playground.comm.oprecord import OpRecord
from playground.comm.requests import DONE, PendingOp, RecvRequest, SendRequest
from playground.comm.transport import COMPLETE, KIND_ARRAY, KIND_NAMES, Message, NoRoom, Transport
from playground.core.errors import CommTimeout, InvalidPeer, MessageMismatch
from playground.tracing.trace import CAT_REDUCE, CAT_SEND, CAT_WAIT, Tracer

SLICE_MS = 100  # longest single blocking receive; abort and deadline are checked between slices
ROOM_POLL_MS = 1  # while waiting for room: the peer makes room by receiving, unannounced
SEND, RECV = 2, 3  # flight ring entries of point-to-point operations (native/comm_core.h)
SCHEDULED, STARTED, COMPLETED, FAILED = 1, 2, 3, 4


__all__ = ["Communicator", "PendingOp", "SLICE_MS", "TAG_BARRIER", "TAG_OBJ"]


class Communicator(CommCore, OpRecord, DesyncCheck, ObjectMessages, LauncherServices):
    """One rank's view of the world: `rank`, `size`, send/recv/isend/irecv/sendrecv, barrier.

    `control` is the launcher's side channel (comm/control.py: `abort_reason()`, `progress()`),
    None when nothing can abort the run from outside, and `check_abort()` / `progress()` use it
    (control.py's LauncherServices); `run_dir` is where the node may write files;
    `hosts[r]` names the host rank r runs on (ranks are placed on hosts in blocks); `collective()`
    and `op_context()` (oprecord.py) say in errors which collective ran; small JSON objects and
    the barrier are objects.py's. `flight_entries`: the flight ring's size (None: PLAYGROUND_FLIGHT_ENTRIES
    or 256 in a file of `run_dir`, 64 in memory without one; 0: no ring).
    """

    def __init__(
        self,
        rank: int,
        size: int,
        transport: Transport,
        *,
        tracer: Tracer | None = None,
        timeout_s: float = 30.0,
        control=None,
        run_dir: Path | None = None,
        hosts: list[str] | None = None,
        flight_entries: int | None = None,
    ):
        self.rank, self.size = rank, size
        self._init_op_record(size, hosts)
        self._init_desync()
        if flight_entries is None:
            flight_entries = flight.entries_from_env() if run_dir is not None else flight.IN_PROCESS_ENTRIES
        self.attach_flight(flight_entries, None if run_dir is None else flight.ring_path(run_dir, rank))
        self.tracer = tracer if tracer is not None else Tracer(rank, None, enabled=False)
        self.timeout_s, self.control, self.run_dir = timeout_s, control, run_dir
        self.transport = transport
        self.bytes_sent = self.bytes_received = 0  # of arrays
        self._pending: dict[tuple[int, int], deque[Message]] = defaultdict(deque)
        self._clock = self.tracer.clock_ns
        # (peer, tag) -> the number of the next message sent / taken (counted when traced): ~0.1 us
        self._send_seq: dict[tuple[int, int], itertools.count] = defaultdict(itertools.count)
        self._recv_seq: dict[tuple[int, int], itertools.count] = defaultdict(itertools.count)
        # how this rank re-forms its group after a peer failed (`recovery.way: peer`): the launcher's
        # worker sets it (launcher/membership.py); None: a failure ends the group
        self.live: Any = None

    def reopen(
        self,
        transport: Transport,
        control,
        hosts: list[str] | None = None,
        rank: int | None = None,
        size: int | None = None,
    ) -> None:
        """Go on in a re-formed group (a live recovery): the same tracer, flight ring and byte counts,
        a new `transport` and launcher `control` link, and the same rank and size unless the group
        shrank (`rank`, `size`: this rank renumbered among the survivors). What belonged to the group
        before (parked messages, per-peer sequence numbers, desync notes) is dropped, as a replacement
        rank starts with none of it; close the old transport first (`close`). Every holder of this
        communicator (a node, its strategy, a communication thread started after) sees the new group."""
        if rank is not None and size is not None:
            self.rank, self.size = rank, size
        self.control = control
        self.transport = transport
        self.hosts = list(hosts) if hosts is not None else self.hosts[: self.size]
        self._pending.clear()
        self._send_seq.clear()
        self._recv_seq.clear()
        self._init_desync()

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size}, transport={self.transport.name})"

    def _set_transport(self, transport: Transport) -> None:
        self._transport = transport
        self.segment_bytes = transport.segment_bytes  # what collectives cut large buffers into here
        # A transport that lands small arrays natively (shm_transport.py) offers these; see _take.
        self._land = getattr(transport, "land", None)
        self._exchange = getattr(transport, "exchange", None)
        self._lend = getattr(transport, "lend", None)

    # Read in C (no frame on the hot path); a wrapper assigned later (a drill) is re-read, not bypassed.
    transport = property(operator.attrgetter("_transport"), _set_transport)

    # -- sending ---------------------------------------------------------------------------
    # isend, isend_lent, recv_reduce, sendrecv_reduce and isend_computed's halves are CommCore's (native/comm_core.c):
    # one C call for the common case (untraced, the peer in range, room at once, nothing parked from the
    # source); everything else goes to _isend, _isend_lent, _recv_reduce, _sendrecv_reduce, _post: the definition.
    def _isend(self, x: np.ndarray, dst: int, tag: int = 0) -> PendingOp:
        """Start sending `x`; do not modify `x` until the request completes (it may go zero-copy)."""
        return self._post(dst, tag, x.nbytes, True, self.transport.send, dst, self._wire_tag(tag), x)

    def _isend_lent(self, x: np.ndarray, dst: int, tag: int = 0) -> PendingOp:
        """isend_lent (CommCore's, C): `isend`, for an array the caller leaves unchanged until the
        request completes: where the transport can (shm, above 64 KiB), the receiver reads it from this
        process's memory, one copy instead of two (shm_lend.py), and the request completes once it
        has. Wait for it. Transports without `lend` send it as `isend` does."""
        return self._post(dst, tag, x.nbytes, True, self._lend, dst, self._wire_tag(tag), x)

    def isend_computed(self, dst: int, tag: int, count: int, dtype, fill) -> PendingOp:
        """Send `count` elements of `dtype` that `fill(out)` writes straight into the outgoing buffer.

        On the shared-memory path `out` is the slot in the ring to `dst`, so a result computed for a
        peer (a reduction the ring forwards) is written once, where the peer reads it, instead of
        into a buffer and then copied into the ring. Otherwise `out` is a new array, sent as usual.
        """
        out = self._try_reserve(dst, count, dtype)
        if out is None:
            out = self._with_room(dst, tag, self.transport.reserve, (dst, count, np.dtype(dtype)))
        fill(out.array)
        return self._post_reserved(out, dst, tag)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        req = self.isend(x, dst, tag)
        if req is not DONE:  # most sends are complete when posted: no call to wait
            req.wait()

    def _post(self, dst: int, tag: int, nbytes: int, is_array: bool, post, *args) -> PendingOp:
        """The one way out: `post(*args)` (a transport's send, given the tag as it travels:
        `_wire_tag(tag)`) once `dst` is checked, retried until it finds room, then counted (arrays
        only: `bytes_sent`), traced and, outside a collective, recorded in the flight ring; a
        request for its completion."""
        traced = self.tracer.messages
        t0 = self._clock() if traced else 0
        got = self._with_room(dst, tag, post, args)
        if is_array:
            self.bytes_sent += nbytes
        if traced:
            self.tracer.add_ns(
                "send", CAT_SEND, t0, self._clock(), dst, tag, nbytes, next(self._send_seq[dst, tag])
            )
        record = (
            0
            if self._depth
            else self._flight_p2p(SEND, dst, tag, nbytes, COMPLETED if got is COMPLETE else SCHEDULED)
        )
        if got is COMPLETE:
            return DONE
        req = SendRequest(self, got, dst, tag)
        req.record = record
        return req

    def _with_room(self, dst: int, tag: int, attempt, args: tuple):
        """What `attempt(*args)` returned once it found room (InvalidPeer for a `dst` out of range);
        while there is none, take in everything that arrives and detach parked messages from the
        transport's memory, so ranks flooding each other all progress."""
        if not 0 <= dst < self.size:
            raise InvalidPeer(self.rank, dst, "destination", self.size)
        got = attempt(*args)
        if type(got) is not NoRoom:
            return got
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._drain()
            for msg in itertools.chain.from_iterable(self._pending.values()):
                msg.detach()
            got = attempt(*args)
            if type(got) is not NoRoom:
                return got
            self.check_abort(dst, tag, "room to send", direction="to")
            if time.monotonic() >= deadline:
                what, ctx = f"room to send to rank {dst} (tag {tag}) in {got.where}", self.op_context(dst)
                raise CommTimeout(
                    self.rank, "send", dst, tag, self.timeout_s, what=what, direction="to", context=ctx
                )
            msg = self.transport.receive(ROOM_POLL_MS)
            if msg is not None:
                self._pending[(msg.src, msg.tag)].append(msg)

    # -- receiving -------------------------------------------------------------------------
    def _drain(self) -> None:
        """Park every message that has already arrived (non-blocking)."""
        receive, pending = self.transport.receive, self._pending
        while (msg := receive(0)) is not None:
            pending[(msg.src, msg.tag)].append(msg)

    def has_message(self, src: int, tag: int) -> bool:
        """Has a message from (src, tag) arrived (non-blocking)?"""
        self._drain()
        return bool(self._pending.get((src, self._wire_tag(tag))))

    def _take(
        self, src: int, tag: int, op: str, timeout_s: float | None, kind: str = KIND_ARRAY, into: tuple = ()
    ) -> Message | Literal[True]:
        """The next message from (src, tag), of `kind` (MessageMismatch otherwise), waiting up to
            the timeout and parking the others; traced as one `recv_wait` (zero-length if it was parked).
            With `into` = (target, ufunc, base) and a transport that can, an array that fits is landed
            there by the transport itself (untraced runs): then True. A wait that is not satisfied at once
            looks at what arrives meanwhile for a peer in another collective (desync.py). (Longer than
        most: the receive path every message takes, kept in one place so its fast path stays flat.)"""
        traced = self.tracer.messages
        wire = self._wire_tag(tag)
        pending = self._pending
        q = pending.get((src, wire))
        record = 0
        if q:
            msg, t0 = q.popleft(), None
            if not q:  # only pairs with messages stay: `pending` is empty when nothing is parked
                del pending[(src, wire)]
        else:
            if not 0 <= src < self.size:
                raise InvalidPeer(self.rank, src, "source", self.size)
            timeout_s = self.timeout_s if timeout_s is None else timeout_s
            t0 = self._clock() if traced else 0
            deadline = time.monotonic() + timeout_s
            receive = self.transport.receive
            land = self._land if into and not traced else None
            record = 0 if self._depth else self._flight_p2p(RECV, src, tag, None, STARTED)
            if pending:  # something parked (by a C receive, a drain): is src in another collective?
                self._check_parked(src, wire)
            waited = False
            while True:
                msg = receive(SLICE_MS) if land is None else land(src, wire, *into, SLICE_MS)
                if msg is None:
                    if not waited:  # a whole slice: the flight ring says whom it waits for, since when
                        waited = True
                        self._flight_wait(src, tag, deadline - timeout_s)
                    self._check_parked(src, wire)
                    self.check_abort(src, tag, op)
                    if time.monotonic() >= deadline:
                        self._flight_done(record, FAILED)
                        raise CommTimeout(self.rank, op, src, tag, timeout_s, context=self.op_context(src))
                elif msg is True or (msg.src == src and msg.tag == wire):
                    break
                elif not self._on_arrival(msg, src, wire):
                    pending[(msg.src, msg.tag)].append(msg)
        if traced:
            msg.landed()  # the simulator's receiver waits for the arrival here
            t1 = self._clock()
            self.tracer.add_ns(
                "recv_wait", CAT_WAIT, t1 if t0 is None else t0, t1, src, tag, next(self._recv_seq[src, tag])
            )
        if msg is not True and msg.kind != kind:
            msg.release()
            got = f"expected {KIND_NAMES[kind]} from rank {msg.src} tag {tag}, got {KIND_NAMES[msg.kind]}"
            raise MessageMismatch(
                f"rank {self.rank}: {got}", rank=self.rank, peer=msg.src, direction="from", tag=tag
            )
        if record:
            self._flight_done(record, COMPLETED)
        elif t0 is None and not self._depth:
            self._flight_p2p(RECV, src, tag, None, COMPLETED)
        return msg

    def recv(
        self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None
    ) -> np.ndarray:
        """The next array from `src` with `tag`: into `out` if given, else a read-only array
        (zero-copy over ZeroMQ)."""
        if out is None:
            msg = self._take_message(src, tag, "recv", timeout_s, KIND_ARRAY)
            self.bytes_received += msg.count * msg.dtype.itemsize
            return msg.owned_array()
        got = self._take(src, tag, "recv", timeout_s, KIND_ARRAY, (out, None, None))
        if got is True:  # landed in `out`
            self.bytes_received += out.nbytes
        else:
            self.bytes_received += got.count * got.dtype.itemsize
            got.copy_into(out)
        return out

    def _recv_reduce(
        self, src: int, tag: int, target: np.ndarray, ufunc=None, base: np.ndarray | None = None
    ) -> int:
        """Receive from (src, tag) straight into `target`: target = ufunc(base, message) (base
        defaults to target itself), or a copy when ufunc is None. Returns the element count
        received; `target` is left alone when that differs from its size (the caller reports it)."""
        msg = self._take(src, tag, "recv", None, KIND_ARRAY, (target, ufunc, base))
        if msg is True:  # landed in `target`
            self.bytes_received += target.nbytes
            return target.size
        count = msg.count
        self.bytes_received += count * msg.dtype.itemsize
        if msg.dtype != target.dtype and msg.kind == KIND_ARRAY:
            msg.release()
            self._dtype_mismatch(src, msg.dtype, target.dtype)
        if count != target.size:
            msg.release()
        elif ufunc is None:
            msg.copy_into(target)
        else:
            t0 = self._clock() if self.tracer.messages else 0
            msg.reduce_into(target, ufunc, base)
            if self.tracer.messages:
                self.tracer.add_ns("reduce", CAT_REDUCE, t0, self._clock(), src, target.nbytes)
        return count

    def _sendrecv_reduce(self, buf: np.ndarray, dst: int, src: int, tag: int = 0, ufunc=None) -> int:
        """sendrecv_reduce: send `buf` to `dst`, then receive from `src` (same tag) into `buf`: buf =
        ufunc(buf, message), or a copy (MPI_Sendrecv_replace, reducing); the count received. Over shm,
        untraced, both halves are one C call (a large buf streams, shm_stream.py)."""
        exchange, pending, size = self._exchange, self._pending, self.size
        if exchange is not None and not self.tracer.messages and 0 <= dst < size and 0 <= src < size:
            # (a message from src parked earlier is the one to take first)
            wire = self._wire_tag(tag)
            got = (
                None
                if pending and pending.get((src, wire))
                else exchange(dst, src, wire, buf, ufunc, SLICE_MS)
            )
            if got is not None:  # posted (otherwise: no room, or too large, so the usual way below)
                nbytes = buf.nbytes
                self.bytes_sent += nbytes
                if got is True:
                    self.bytes_received += nbytes
                    return buf.size
                if got is not False:
                    pending[(got.src, got.tag)].append(got)
                return self.recv_reduce(src, tag, buf, ufunc)
        req = self.isend(buf, dst, tag)
        if req is not DONE:
            req.wait()
        return self.recv_reduce(src, tag, buf, ufunc)

    def irecv(self, src: int, tag: int = 0, out: np.ndarray | None = None) -> PendingOp:
        return RecvRequest(self, src, tag, out)

    def sendrecv(
        self, x: np.ndarray, dst: int, src: int, tag: int = 0, out: np.ndarray | None = None
    ) -> np.ndarray:
        req = self.isend(x, dst, tag)
        y = self.recv(src, tag, out=out)
        req.wait()
        return y

    def close(self) -> None:
        self._pending.clear()
        self.transport.close()


configure_comm(DONE, COMPLETE, NoRoom, SendRequest, np.dtype, SLICE_MS)
