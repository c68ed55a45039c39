"""Small JSON objects between ranks, and the barrier: the control messages of a Communicator.

Arrays travel as raw buffers; control data (a rank's result, a table of addresses, a go-ahead) as
small JSON values, never pickle, through the same one send path and the same matching as arrays,
on negative tags of their own. The Communicator is an ObjectMessages.
"""

import json

import numpy as np

from playground.comm.transport import KIND_OBJ

TAG_BARRIER = -1  # internal tags are negative; user tags are >= 0
TAG_OBJ = -2


class ObjectMessages:
    """send_obj / recv_obj / bcast_obj / allgather_obj, and barrier, over the communicator's `_post`
    (the one send path) and `_take` (the one receive)."""

    def send_obj(self, obj, dst: int, tag: int = 0) -> None:
        """Send a small JSON-able object (control data, never bulk arrays)."""
        body = json.dumps(obj).encode()
        self._post(dst, tag, len(body), False, self.transport.send_obj, dst, tag, body)

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        return self._take(src, tag, "recv_obj", timeout_s, KIND_OBJ).obj()

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
            self._take((self.rank - dist) % self.size, TAG_BARRIER, "barrier", timeout_s).release()
            dist *= 2
