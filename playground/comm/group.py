"""A sub-communicator: some ranks of a communicator, renumbered 0..k-1, as MPI_Comm_split makes.

Hierarchical algorithms run ordinary collectives inside a node and across nodes; a `Group` gives
them a communicator whose `rank`, `size` and peers are those of the group, and whose tags are
shifted so that two groups a rank belongs to never confuse their messages. Everything else
(matching, deadlines, tracing, the transport) is the parent's.
"""

import numpy as np


class Group:
    """Ranks `members` (parent ranks, in group order) of `parent`; this rank must be one of them."""

    def __init__(self, parent, members: list[int], tag_offset: int):
        self.parent, self.members, self.tag_offset = parent, list(members), tag_offset
        self.rank, self.size = self.members.index(parent.rank), len(self.members)
        self.tracer, self.timeout_s, self.segment_bytes = (
            parent.tracer,
            parent.timeout_s,
            parent.segment_bytes,
        )

    def __repr__(self):
        return f"Group(rank={self.rank}, size={self.size}, members={self.members})"

    def isend(self, x: np.ndarray, dst: int, tag: int = 0):
        return self.parent.isend(x, self.members[dst], tag + self.tag_offset)

    def isend_computed(self, dst: int, tag: int, count: int, dtype, fill):
        return self.parent.isend_computed(self.members[dst], tag + self.tag_offset, count, dtype, fill)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        self.isend(x, dst, tag).wait()

    def recv(self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None):
        return self.parent.recv(self.members[src], tag + self.tag_offset, out, timeout_s)

    def recv_reduce(self, src: int, tag: int, target: np.ndarray, ufunc=None, base=None) -> int:
        return self.parent.recv_reduce(self.members[src], tag + self.tag_offset, target, ufunc, base)

    def sendrecv_reduce(self, buf: np.ndarray, dst: int, src: int, tag: int = 0, ufunc=None) -> int:
        members = self.members
        return self.parent.sendrecv_reduce(buf, members[dst], members[src], tag + self.tag_offset, ufunc)
