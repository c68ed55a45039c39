"""Process groups: some ranks of a communicator, renumbered 0..k-1, as MPI_Comm_split and torch's
`new_group` make them, and the grid that model parallelism arranges ranks in.

A `Group` is a communicator for everything above it: its `rank`, `size` and peers are the group's,
every collective and algorithm runs on it unchanged, and groups nest (a group of a group). It owns
no transport: a message goes through the parent's one send path and matching, to the parent rank
`members[dst]`, on the tag shifted by the group's `tag_offset`. Two groups a rank belongs to never
confuse their messages because every group made from one communicator gets its own offset, taken
in creation order: all ranks make their groups in the same order (MPI's and torch's rule too), so
they agree on the offsets without a message. The groups of one `split` are disjoint and share one.

Errors stay the parent's: a timeout names the parent rank it waited for and the collective, marked
with the group's name ("allreduce[tensor] ring #3").

    Grid(comm, data=2, pipeline=2, tensor=1)        rank = (pipeline_index * data + data_index) * tensor + tensor_index

The tensor index varies fastest, then data, then pipeline (Megatron-LM's order): the ranks of one
tensor-parallel group are neighbours (on one host when ranks are placed in blocks), which suits
the group that communicates on every layer.
"""

import contextlib
from dataclasses import dataclass

import numpy as np

from playground.comm.objects import ObjectMessages
from playground.core.errors import UsageError

TAG_SPACE = 1 << 16  # each group's tags are the parent's shifted by a multiple of this (tags are i32)


def _next_offset(parent) -> int:
    """The parent's next group tag offset: -65536, -131072, ... in creation order."""
    made = getattr(parent, "_groups_made", 0) + 1
    parent._groups_made = made
    if made >= (1 << 15) // 2:
        raise UsageError(f"{parent!r}: more than {(1 << 15) // 2 - 1} groups made from one communicator")
    return parent.tag_offset - made * TAG_SPACE if isinstance(parent, Group) else -made * TAG_SPACE


class Group(ObjectMessages):
    """Ranks `members` (parent ranks, in group order) of `parent`; this rank must be one of them.
    Make one with `new_group`, `split` or `Grid`, which give it its own tag offset."""

    def __init__(self, parent, members: list[int], tag_offset: int, name: str = "group"):
        members = [int(m) for m in members]
        if len(set(members)) != len(members) or not all(0 <= m < parent.size for m in members):
            raise UsageError(
                f"group {name}: members must be distinct ranks of 0..{parent.size - 1}, got {members}"
            )
        if parent.rank not in members:
            raise UsageError(f"group {name}: rank {parent.rank} is not one of its members {members}")
        self.parent, self.members, self.tag_offset, self.name = parent, members, tag_offset, name
        self.rank, self.size = members.index(parent.rank), len(members)
        self.hosts = [parent.hosts[m] for m in members]
        self.tracer, self.timeout_s, self.segment_bytes = (
            parent.tracer,
            parent.timeout_s,
            parent.segment_bytes,
        )
        self.control, self.run_dir = parent.control, parent.run_dir

    def __repr__(self):
        return f"Group({self.name}, rank={self.rank}, size={self.size}, members={self.members})"

    @property
    def transport(self):
        return self.parent.transport

    @property
    def ranks_per_node(self) -> int:
        return self.hosts.count(self.hosts[self.rank])

    def _peer(self, r: int) -> int:
        if not 0 <= r < self.size:
            raise UsageError(f"{self!r}: peer {r} is not a rank of the group (0..{self.size - 1})")
        return self.members[r]

    # -- point to point, through the parent's paths ------------------------------------------
    def isend(self, x: np.ndarray, dst: int, tag: int = 0):
        return self.parent.isend(x, self._peer(dst), tag + self.tag_offset)

    def isend_computed(self, dst: int, tag: int, count: int, dtype, fill):
        return self.parent.isend_computed(self._peer(dst), tag + self.tag_offset, count, dtype, fill)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        self.isend(x, dst, tag).wait()

    def recv(self, src: int, tag: int = 0, out: np.ndarray | None = None, timeout_s: float | None = None):
        return self.parent.recv(self._peer(src), tag + self.tag_offset, out, timeout_s)

    def irecv(self, src: int, tag: int = 0, out: np.ndarray | None = None):
        return self.parent.irecv(self._peer(src), tag + self.tag_offset, out)

    def sendrecv(self, x: np.ndarray, dst: int, src: int, tag: int = 0, out: np.ndarray | None = None):
        return self.parent.sendrecv(x, self._peer(dst), self._peer(src), tag + self.tag_offset, out)

    def recv_reduce(self, src: int, tag: int, target: np.ndarray, ufunc=None, base=None) -> int:
        return self.parent.recv_reduce(self._peer(src), tag + self.tag_offset, target, ufunc, base)

    def sendrecv_reduce(self, buf: np.ndarray, dst: int, src: int, tag: int = 0, ufunc=None) -> int:
        return self.parent.sendrecv_reduce(
            buf, self._peer(dst), self._peer(src), tag + self.tag_offset, ufunc
        )

    def has_message(self, src: int, tag: int) -> bool:
        return self.parent.has_message(self._peer(src), tag + self.tag_offset)

    def check_abort(
        self, src: int | None = None, tag: int | None = None, op: str = "", direction: str = "from"
    ):
        peer = None if src is None else self._peer(src)
        self.parent.check_abort(peer, None if tag is None else tag + self.tag_offset, op, direction)

    # ObjectMessages' bcast_obj, allgather_obj and barrier run on these three:
    def send_obj(self, obj, dst: int, tag: int = 0) -> None:
        self.parent.send_obj(obj, self._peer(dst), tag + self.tag_offset)

    def recv_obj(self, src: int, tag: int = 0, timeout_s: float | None = None):
        return self.parent.recv_obj(self._peer(src), tag + self.tag_offset, timeout_s)

    def _take(self, src: int, tag: int, *args, **kwargs):
        return self.parent._take(self._peer(src), tag + self.tag_offset, *args, **kwargs)

    # -- what errors say -----------------------------------------------------------------------
    def begin_collective(self, name: str, algorithm: str = "") -> None:
        self.parent.begin_collective(f"{name}[{self.name}]", algorithm)

    def end_collective(self) -> None:
        self.parent.end_collective()

    @contextlib.contextmanager
    def collective(self, name: str, algorithm: str = ""):
        self.begin_collective(name, algorithm)
        try:
            yield self
        finally:
            self.end_collective()

    def progress(self, done: int, total: int, label: str = "") -> None:
        self.parent.progress(done, total, label)


def new_group(comm, ranks: list[int], name: str = "group") -> Group | None:
    """The group of `ranks` (in that order), or None on a rank outside it. Every rank of `comm` must
    call it, with the same ranks, in the same order as its other groups (torch's `new_group` rule):
    that is how the offsets agree."""
    offset = _next_offset(comm)
    return Group(comm, ranks, offset, name) if comm.rank in ranks else None


def split(comm, color: int, key: int = 0, name: str = "split") -> Group:
    """MPI_Comm_split: the ranks that give the same `color` form a group, ordered by (key, rank).
    Collective over `comm` (one all-gather of (color, key))."""
    offset = _next_offset(comm)
    pairs = comm.allgather_obj([int(color), int(key)])
    members = sorted((k, r) for r, (c, k) in enumerate(pairs) if c == color)
    return Group(comm, [r for _, r in members], offset, f"{name}{color}")


@dataclass(frozen=True)
class GridShape:
    """data x pipeline x tensor ranks; their product is the world's size."""

    data: int = 1
    pipeline: int = 1
    tensor: int = 1

    @property
    def size(self) -> int:
        return self.data * self.pipeline * self.tensor

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(data, pipeline, tensor) index of `rank`."""
        rest, t = divmod(rank, self.tensor)
        p, d = divmod(rest, self.data)
        return d, p, t

    def rank_of(self, data: int, pipeline: int, tensor: int) -> int:
        return (pipeline * self.data + data) * self.tensor + tensor

    def members(self, rank: int, axis: str) -> list[int]:
        """The ranks that share every index of `rank` but `axis`'s, in that axis's order."""
        d, p, t = self.coords(rank)
        if axis == "data":
            return [self.rank_of(i, p, t) for i in range(self.data)]
        if axis == "pipeline":
            return [self.rank_of(d, i, t) for i in range(self.pipeline)]
        if axis == "tensor":
            return [self.rank_of(d, p, i) for i in range(self.tensor)]
        raise UsageError(f"grid axis: one of data, pipeline, tensor, got {axis!r}")


class Grid:
    """This rank's three groups of a data x pipeline x tensor arrangement of `comm`'s ranks:
    `data` (same pipeline stage and tensor shard: the gradients' all-reduce), `pipeline` (same data
    replica and shard: activations go stage to stage), `tensor` (one layer's shards: an all-reduce per
    block). Made the same way on every rank, without a message."""

    AXES = ("data", "pipeline", "tensor")

    def __init__(self, comm, data: int = 1, pipeline: int = 1, tensor: int = 1):
        self.shape = GridShape(data, pipeline, tensor)
        if min(data, pipeline, tensor) < 1 or self.shape.size != comm.size:
            raise UsageError(
                f"grid data={data} x pipeline={pipeline} x tensor={tensor} = {self.shape.size} ranks, "
                f"but the communicator has {comm.size}"
            )
        self.comm = comm
        self.data_index, self.pipeline_index, self.tensor_index = self.shape.coords(comm.rank)
        for axis in self.AXES:
            members = self.shape.members(comm.rank, axis)
            setattr(self, axis, Group(comm, members, _next_offset(comm), axis))

    def __repr__(self):
        s = self.shape
        return (
            f"Grid(data={s.data}, pipeline={s.pipeline}, tensor={s.tensor}; rank {self.comm.rank} at "
            f"data {self.data_index}, stage {self.pipeline_index}, shard {self.tensor_index})"
        )
