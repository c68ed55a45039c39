"""The server's KV memory: one float32 array of token slots, laid out so attention reads each
layer's keys and values as runs of memory.

On the wire a token's KV is one row of `width` floats (server/protocol.py). With an attention layout
(`KVLayout`: layers, heads, head_dim) the row is K and V of every layer, `layers x 2 x heads x
head_dim` in C order: [layer 0 K, layer 0 V, layer 1 K, ...], each `heads x head_dim`. In memory
the pool is split into *planes*, one per (layer, K or V), as vLLM's and nano-vllm's caches are:
plane 2l holds the keys of layer l, plane 2l + 1 its values, each `capacity_slots x heads x
head_dim`. So a block of `block_size` slots is one run of `block_size x heads x head_dim` floats
in each plane, and a contiguous sequence's keys of one layer are one run from its first slot to
its last: the two access patterns the attention kernels compare. Without a layout (opaque KV,
any width, the KV-cache lab's default before attention) there is one plane of `width` floats a
slot, the old token-major array.

Slots are the policies' unit (block_manager.py, contiguous.py): a write, read or copy names slots,
and the planes move together.
"""

from dataclasses import dataclass

import numpy as np

from playground.core.errors import UsageError
from playground.kvcache.engine.allocation import Copy

KV_DTYPE = np.dtype("<f4")  # the pool's and the wire's: float32, little-endian


@dataclass(frozen=True)
class KVLayout:
    """What a token's KV row holds: K and V of `layers` layers, `heads x head_dim` each."""

    layers: int
    heads: int
    head_dim: int

    def __post_init__(self):
        for name in ("layers", "heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"must be an integer >= 1, got {value!r}", field=name)

    @property
    def width(self) -> int:
        return self.layers * 2 * self.heads * self.head_dim

    @property
    def query_width(self) -> int:
        """Floats of one query (one sequence, one layer): heads x head_dim."""
        return self.heads * self.head_dim

    def to_dict(self) -> dict:
        return {"layers": self.layers, "heads": self.heads, "head_dim": self.head_dim}


class KVPool:
    """`planes` is (num_planes, capacity_slots, floats per plane); see the module doc."""

    def __init__(self, capacity_slots: int, width: int, layout: KVLayout | None = None):
        if layout is not None and layout.width != width:
            raise UsageError(
                f"width {width} != layers x 2 x heads x head_dim = {layout.width} of {layout}", field="width"
            )
        self.capacity_slots, self.width, self.layout = capacity_slots, width, layout
        num_planes, per_plane = (2 * layout.layers, layout.query_width) if layout else (1, width)
        self.planes = np.empty((num_planes, capacity_slots, per_plane), dtype=KV_DTYPE)
        self.planes.fill(0)  # every page faulted in now, as a GPU server allocates its cache at start

    @property
    def nbytes(self) -> int:
        return self.planes.nbytes

    def write(self, slots, rows: np.ndarray) -> None:
        """Rows (n, width) of the wire format into the n slots."""
        num_planes, _, per_plane = self.planes.shape
        self.planes[:, slots] = rows.reshape(len(rows), num_planes, per_plane).transpose(1, 0, 2)

    def read(self, slots) -> np.ndarray:
        """The rows (n, width) of the n slots, in the wire format."""
        gathered = self.planes[:, slots]  # (planes, n, per_plane), a copy
        return np.ascontiguousarray(gathered.transpose(1, 0, 2)).reshape(-1, self.width)

    def copy(self, copies: list[Copy]) -> None:
        """Each copy in order (a source is read before a later copy reuses it); runs may overlap."""
        for c in copies:
            self.planes[:, c.dst_slot : c.dst_slot + c.num_slots] = self.planes[
                :, c.src_slot : c.src_slot + c.num_slots
            ]

    def keys(self, layer: int) -> np.ndarray:
        """Layer `layer`'s key plane as (capacity_slots, heads, head_dim), a view."""
        return self._plane(2 * layer)

    def values(self, layer: int) -> np.ndarray:
        return self._plane(2 * layer + 1)

    def _plane(self, index: int) -> np.ndarray:
        if self.layout is None:
            raise UsageError(f"opaque KV of width {self.width} has no attention layout")
        return self.planes[index].reshape(self.capacity_slots, self.layout.heads, self.layout.head_dim)

    def write_layer(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """The model's keys and values (n, heads, head_dim) of one layer into the n slots."""
        self.keys(layer)[slots] = k
        self.values(layer)[slots] = v
