"""What moves a message between ranks: the `Transport` protocol, and the `Message` it delivers.

The `Communicator` (communicator.py) owns everything a program sees: matching by (source, tag),
parking what arrives early, deadlines, abort checks, object messages, tracing. Below it, a
transport only moves bytes, in four calls:

    send(dst, tag, x)            post an array; never blocks
    reserve(dst, count, dtype)   space for an outgoing array the caller computes in place,
    send_reserved(out, tag)        then post it (a reduction written where the peer reads it)
    send_obj(dst, tag, body)     post a small UTF-8 JSON body
    receive(timeout_ms)          the next message that arrived for this rank, or None after the wait

A post that finds no room right now (a full pipe or ring on the shared-memory path) returns a
`NoRoom` saying where, and has done nothing: the communicator waits, taking in what arrives
meanwhile, and tries again. Otherwise a post returns a `Completion`: `COMPLETE` when the caller
may reuse its array at once, or a handle that completes when a zero-copy send has left.

Two optional calls, offered by the shm transport for small arrays and used by the communicator
when present and untraced: `land(src, tag, target, ufunc, base, timeout_ms)` is `receive`, except
that the array from (src, tag) that fits `target` is reduced (or copied) into it in C and True
returned; `exchange(dst, src, tag, buf, ufunc, timeout_ms)` posts `buf` and lands in it, in one call
(None: nothing was posted). A transport without them runs the same code through the calls above.

Messages from one sender arrive in the order they were posted. A `Message` is valid until it is
released; its payload is read by `copy_into`, `reduce_into` or `owned_array` (each releases it),
or viewed with `array()` (then `release()`). A parked message that holds transport resources
(a slot in a shared-memory ring the sender waits for) gives them up with `detach()`.

Transports: zmq_transport.py (ipc and tcp), shm_transport.py (one host: rings and pipes),
local.py (threads in one process, for fast tests), faults.py (a wrapper for failure drills).
"""

import json
from typing import TYPE_CHECKING, Protocol

import numpy as np

KIND_ARRAY = "array"  # a Message's kind: what the receiver gets (wire.py's kinds say how it travels)
KIND_OBJ = "obj"
KIND_NAMES = {KIND_ARRAY: "an array", KIND_OBJ: "an object"}  # as an error says them


class NoRoom:
    """A post that found no room: nothing was sent; `where` completes "waiting for room to send to
    rank D (tag T) in ..."."""

    __slots__ = ("where",)

    def __init__(self, where: str):
        self.where = where

    def __repr__(self):
        return f"NoRoom({self.where!r})"


class Completion(Protocol):
    """When a posted array may be modified again."""

    @property
    def done(self) -> bool: ...

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s`; True once complete."""
        ...


class _Complete:
    done = True

    def wait(self, timeout_s: float) -> bool:
        return True


COMPLETE = _Complete()


class Outgoing:
    """Space for one outgoing array (from `reserve`): fill `array`, then `send_reserved` it."""

    __slots__ = ("dst", "array", "token")

    def __init__(self, dst: int, array: np.ndarray, token=None):
        self.dst, self.array, self.token = dst, array, token


class Message:
    """One message as it arrived: who sent it, its tag, and an array or a JSON body.

    This base class holds its payload in memory it owns (bytes, a ZeroMQ frame, an array);
    transports whose payload lives elsewhere subclass it and override `array`, `release`, `detach`.
    """

    __slots__ = ("src", "tag", "kind", "dtype", "shape", "payload")

    def __init__(self, src: int, tag: int, kind: str, dtype: np.dtype, shape: tuple, payload):
        self.src, self.tag, self.kind, self.dtype, self.shape, self.payload = (
            src,
            tag,
            kind,
            dtype,
            shape,
            payload,
        )

    def __repr__(self):
        return f"Message(src={self.src}, tag={self.tag}, {self.kind}, {self.dtype}, {self.shape})"

    @property
    def count(self) -> int:
        """Number of elements (of an array message)."""
        shape = self.shape
        if len(shape) == 1:
            return shape[0]
        n = 1
        for d in shape:
            n *= d
        return n

    def array(self) -> np.ndarray:
        """A read-only view of the array, valid until `release()`."""
        arr = np.frombuffer(self.payload, dtype=self.dtype)
        return arr if len(self.shape) == 1 else arr.reshape(self.shape)

    def owned_array(self) -> np.ndarray:
        """The array, in memory the caller may keep (zero-copy where the payload is ours)."""
        return self.array()

    def copy_into(self, out: np.ndarray) -> None:
        """Write the array into `out` (same element count and dtype; TypeError on another dtype)."""
        arr = self.array()
        np.copyto(out if out.shape == arr.shape else out.reshape(arr.shape), arr, casting="no")
        self.release()

    def reduce_into(self, target: np.ndarray, ufunc, base: np.ndarray | None = None) -> None:
        """target = ufunc(base or target, array), element by element."""
        arr = self.array()
        if arr.shape != target.shape:
            arr = arr.reshape(target.shape)
        ufunc(target if base is None else base, arr, out=target)
        self.release()

    def obj(self):
        """The JSON value of an object message."""
        body = self.payload
        self.release()
        return json.loads(body if isinstance(body, bytes) else bytes(body))

    def landed(self) -> None:
        """Wait until the message has fully arrived: a no-op for real transports (it is here once
        received); the simulator moves the receiver's virtual clock to the arrival."""

    def release(self) -> None:
        """Give back what the transport lent for this message (nothing, here)."""

    def detach(self) -> None:
        """Stop depending on the transport's memory (nothing to do, here)."""


class Transport(Protocol):
    """How a communicator's messages travel; see the module docstring for the contract."""

    name: str  # "ipc", "tcp", "shm", "local", ...
    segment_bytes: int  # the message size collectives cut large buffers into on this transport

    def send(self, dst: int, tag: int, x: np.ndarray) -> Completion | NoRoom:
        """Post `x` (any memory layout) to `dst`; do not modify `x` until the completion is done."""
        ...

    def reserve(self, dst: int, count: int, dtype: np.dtype) -> Outgoing | NoRoom:
        """Writable space for `count` elements to `dst`; `send_reserved` must follow, before the
        next reserve for `dst`."""
        ...

    def send_reserved(self, out: Outgoing, tag: int) -> Completion | NoRoom:
        """Post what was written into `out.array` (again after NoRoom: the space stays reserved)."""
        ...

    def send_obj(self, dst: int, tag: int, body: bytes) -> Completion | NoRoom:
        """Post a UTF-8 JSON body."""
        ...

    def receive(self, timeout_ms: int) -> Message | None:
        """The next message for this rank, waiting up to `timeout_ms` (0: only what has arrived)."""
        ...

    def close(self) -> None: ...


class PlainReserve:
    """`reserve` / `send_reserved` for transports that send a computed array like any other."""

    if TYPE_CHECKING:  # the transport's own, for the type checker

        def send(self, dst: int, tag: int, x: np.ndarray) -> Completion | NoRoom: ...

    def reserve(self, dst: int, count: int, dtype: np.dtype) -> Outgoing:
        return Outgoing(dst, np.empty(count, dtype))

    def send_reserved(self, out: Outgoing, tag: int) -> Completion | NoRoom:
        return self.send(out.dst, tag, out.array)
