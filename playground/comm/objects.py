"""Small JSON objects between ranks, and the barrier: the control messages of a Communicator.

Arrays travel as raw buffers; control data (a rank's result, a table of addresses, a go-ahead) as
small JSON values, never pickle, through the same one send path and the same matching as arrays,
on negative tags of their own. The Communicator is an ObjectMessages.
"""

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from playground.comm.requests import PendingOp
from playground.comm.transport import KIND_ARRAY, KIND_OBJ, Message, Transport

TAG_BARRIER = -1  # internal tags are negative; user tags are >= 0
TAG_OBJ = -2  # (-3: optags.TAG_MISMATCH)


class ObjectMessages:
    """send_obj / recv_obj / bcast_obj / allgather_obj, and barrier, over the communicator's `_post`
    (the one send path) and `_take` (the one receive)."""

    if TYPE_CHECKING:  # what the class this is mixed into provides (Communicator, Group); declared
        # for the type checker only, so that nothing here shadows it (isend is CommCore's C fast path)
        rank: int
        size: int

        @property
        def transport(self) -> Transport: ...

        def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> PendingOp: ...

        def sendrecv_reduce(self, buf: np.ndarray, dst: int, src: int, tag: int = 0, ufunc=None) -> int: ...

        def collective(self, name: str, algorithm: str = "", x=None, op=None): ...

        def _post(
            self, dst: int, tag: int, nbytes: int, is_array: bool, post: Callable, *args
        ) -> PendingOp: ...

        def _wire_tag(self, tag: int) -> int: ...

        def _take(  # True only when asked to land an array (`into`)
            self, src: int, tag: int, op: str, timeout_s: float | None, kind: str = ..., into: tuple = ...
        ) -> Message | Literal[True]: ...

    def _take_message(self, src: int, tag: int, op: str, timeout_s: float | None, kind: str) -> Message:
        """`_take` without `into`: always a Message, never landed."""
        return cast(Message, self._take(src, tag, op, timeout_s, kind))

    def send_obj(self, obj, dst: int, tag: int = 0) -> None:
        """Send a small JSON-able object (control data, never bulk arrays)."""
        body = json.dumps(obj).encode()
        self._post(dst, tag, len(body), False, self.transport.send_obj, dst, self._wire_tag(tag), body)

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        return self._take_message(src, tag, "recv_obj", timeout_s, KIND_OBJ).obj()

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
        """Dissemination barrier: ceil(log2 N) rounds, each an empty message sent to the rank `dist`
        ahead while one is taken from the rank `dist` behind, no coordinator involved. Without a
        timeout of its own, each round is one `sendrecv_reduce` (over shared memory, one C call:
        a timed loop's barrier leaves the ranks as close together as a C barrier would)."""
        if self.size == 1:
            return
        token = np.empty(0, dtype=np.uint8)  # empty: a corrupt drill flips the next array with bytes
        with self.collective("barrier", "dissemination", token):  # matched: a peer elsewhere is named
            dist = 1
            while dist < self.size:
                dst, src = (self.rank + dist) % self.size, (self.rank - dist) % self.size
                if timeout_s is None:
                    self.sendrecv_reduce(token, dst, src, TAG_BARRIER)
                else:
                    self.isend(token, dst, TAG_BARRIER)
                    self._take_message(src, TAG_BARRIER, "barrier", timeout_s, KIND_ARRAY).release()
                dist *= 2
