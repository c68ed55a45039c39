"""Process groups: some ranks of a communicator, renumbered 0..k-1, as MPI_Comm_split and torch's
`new_group` make them, and the grid that model parallelism arranges ranks in.

A `Group` is a communicator for everything above it: its `rank`, `size` and peers are the group's,
every collective and algorithm runs on it unchanged, and groups nest (a group of a group). It owns
no transport: a message goes through the root communicator's one send path and matching, to the
root rank of each peer, on the tag shifted by the group's `tag_offset` (a multiple of TAG_SPACE).
Offsets are agreed as MPI agrees on a new communicator's context id: the parent's ranks all-gather
the offsets each of them already uses and take the smallest one none of them uses. So two groups
that share two ranks never share an offset, whatever their depth, and ranks outside a parent can
make other groups meanwhile without the offsets drifting apart. Tags given to a group stay within
+-TAG_SPACE/2 (the collectives use -10..-300, nodes small positive ones). A process has at most
MAX_GROUPS - 1 = 15 groups: with their offsets every tag stays below 2**20, under the bits a matched
collective's salt takes (comm/optags.py).

Errors stay the parent's: a timeout names the parent rank it waited for and the collective, marked
with the group's name ("allreduce[tensor] ring #3"); a group numbers its matched collectives itself
(`group_seq`), so the flight recorder lines a group's collectives up across its ranks.

    Grid(comm, data=2, pipeline=2, tensor=1)        rank = (pipeline_index * data + data_index) * tensor + tensor_index

The tensor index varies fastest, then data, then pipeline (Megatron-LM's order): the ranks of one
tensor-parallel group are neighbours (on one host when ranks are placed in blocks), which suits
the group that communicates on every layer.
"""

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from playground.comm.objects import ObjectMessages
from playground.core.errors import UsageError

TAG_SPACE = 1 << 16  # a group's tags are the root's shifted by a multiple of this (tags are i32)
MAX_GROUPS = 16  # (TAG_LIMIT / TAG_SPACE: optags.py)


def _root(comm):
    return comm.parent if isinstance(comm, Group) else comm


def _agree_offsets(comm, count: int) -> list[int]:
    """`count` new group offsets all of `comm`'s ranks agree on (one all-gather over `comm`), none
    used by any of them yet; each rank records them as used."""
    root = _root(comm)
    used = getattr(root, "_group_offsets", None)
    if used is None:
        used = root._group_offsets = {0}
    taken = set().union(*map(set, comm.allgather_obj(sorted(used))))
    free = [k for k in range(1, MAX_GROUPS) if -k * TAG_SPACE not in taken][:count]
    if len(free) < count:
        raise UsageError(f"{comm!r}: no free group offsets left ({MAX_GROUPS - 1} groups per process)")
    offsets = [-k * TAG_SPACE for k in free]
    used.update(offsets)
    return offsets


class Group(ObjectMessages):
    """Ranks `members` (parent ranks, in group order) of `parent`; this rank must be one of them.
    Make one with `new_group`, `split` or `Grid`, which give it its own tag offset."""

    parent: Any  # the root communicator (a Communicator, or anything with its methods)
    members: list[int]  # ranks of the root
    tag_offset: int

    def __init__(self, parent, members: list[int], tag_offset: int, name: str = "group"):
        members = [int(m) for m in members]
        if len(set(members)) != len(members) or not all(0 <= m < parent.size for m in members):
            raise UsageError(
                f"group {name}: members must be distinct ranks of 0..{parent.size - 1}, got {members}"
            )
        if parent.rank not in members:
            raise UsageError(f"group {name}: rank {parent.rank} is not one of its members {members}")
        self.rank, self.size, self.name = members.index(parent.rank), len(members), name
        self.hosts = [parent.hosts[m] for m in members]
        if isinstance(parent, Group):  # a group of a group is a group of the root: one hop, one offset
            members, tag_offset = [parent.members[m] for m in members], tag_offset + parent.tag_offset
            parent = parent.parent
        self.parent, self.members, self.tag_offset = parent, members, tag_offset
        self.tracer, self.timeout_s, self.segment_bytes = (
            parent.tracer,
            parent.timeout_s,
            parent.segment_bytes,
        )
        self.control, self.run_dir = parent.control, parent.run_dir
        self.num_matched = 0  # matched collectives begun on this group

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

    def isend_lent(self, x: np.ndarray, dst: int, tag: int = 0):
        return self.parent.isend_lent(x, self._peer(dst), tag + self.tag_offset)

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
    def begin_collective(self, name: str, algorithm: str = "", x=None, op=None) -> None:
        """The root's, named with the group's name, numbered among the group's matched collectives."""
        if x is None and op is None:
            self.parent.begin_collective(f"{name}[{self.name}]", algorithm)
            return
        self.num_matched += 1
        self.parent.begin_collective(
            f"{name}[{self.name}]", algorithm, x, op, self.tag_offset, self.num_matched
        )

    def end_collective(self, ok: bool = True) -> None:
        self.parent.end_collective(ok)

    @contextlib.contextmanager
    def collective(self, name: str, algorithm: str = "", x=None, op=None):
        self.begin_collective(name, algorithm, x, op)
        try:
            yield self
        except BaseException:
            self.end_collective(False)
            raise
        self.end_collective()

    def progress(self, done: int, total: int, label: str = "") -> None:
        self.parent.progress(done, total, label)


def new_group(comm, ranks: list[int], name: str = "group") -> Group | None:
    """The group of `ranks` (in that order), or None on a rank outside it. Every rank of `comm` must
    call it with the same ranks (torch's `new_group` rule): its ranks agree on the offset."""
    (offset,) = _agree_offsets(comm, 1)
    return Group(comm, ranks, offset, name) if comm.rank in ranks else None


def split(comm, color: int, key: int = 0, name: str = "split") -> Group:
    """MPI_Comm_split: the ranks that give the same `color` form a group, ordered by (key, rank).
    Collective over `comm` (two all-gathers: the offset, then (color, key))."""
    (offset,) = _agree_offsets(comm, 1)
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
    block). Collective over `comm` (one all-gather agrees on the three offsets)."""

    AXES = ("data", "pipeline", "tensor")
    data: "Group"
    pipeline: "Group"
    tensor: "Group"

    def __init__(self, comm, data: int = 1, pipeline: int = 1, tensor: int = 1):
        self.shape = GridShape(data, pipeline, tensor)
        if min(data, pipeline, tensor) < 1 or self.shape.size != comm.size:
            raise UsageError(
                f"grid data={data} x pipeline={pipeline} x tensor={tensor} = {self.shape.size} ranks, "
                f"but the communicator has {comm.size}"
            )
        self.comm = comm
        self.data_index, self.pipeline_index, self.tensor_index = self.shape.coords(comm.rank)
        for axis, offset in zip(self.AXES, _agree_offsets(comm, len(self.AXES)), strict=True):
            setattr(self, axis, Group(comm, self.shape.members(comm.rank, axis), offset, axis))

    def __repr__(self):
        s = self.shape
        return (
            f"Grid(data={s.data}, pipeline={s.pipeline}, tensor={s.tensor}; rank {self.comm.rank} at "
            f"data {self.data_index}, stage {self.pipeline_index}, shard {self.tensor_index})"
        )
