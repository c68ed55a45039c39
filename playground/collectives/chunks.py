"""Pure helpers that cut a buffer into chunks (one per rank) and segments (pipelining units)."""

import functools
import time
from collections.abc import Callable

import numpy as np

from playground.core.dtypes import resolve
from playground.core.errors import UsageError

DEFAULT_SEGMENT_BYTES = 1 << 20


def segment_bytes_for(comm) -> int:
    """The communicator's preferred segment: 1 MiB over ZeroMQ, 4 MiB over shared memory, where a
    message costs a descriptor, not a trip through the kernel (measured when ZeroMQ carried the
    descriptors: +13-16% busbw at 2 and 8 ranks; with pipes 1 and 4 MiB are within the noise;
    over ZeroMQ 128 KiB-2 MiB gain nothing)."""
    return comm.segment_bytes


_PHANTOMS: dict[np.dtype, np.ndarray] = {}
_PHANTOM_MAX = 1 << 48


def phantom(count: int, dtype) -> np.ndarray:
    """An array of `count` elements stored in one (every stride 0): what a data-free simulation
    passes to the algorithms, whose messages then carry sizes, not bytes (playground.sim)."""
    dtype = resolve(dtype)
    base = _PHANTOMS.get(dtype)
    if base is None:
        base = _PHANTOMS[dtype] = np.lib.stride_tricks.as_strided(
            np.zeros(1, dtype), shape=(_PHANTOM_MAX,), strides=(0,), writeable=True
        )
    return base[:count]


def is_phantom(x: np.ndarray) -> bool:
    return x.ndim == 1 and x.size > 1 and x.strides[0] == 0


# Buffers are made through these helpers, never with np.empty/np.array directly, so that a
# phantom input gives phantom buffers (a 1 GiB all-reduce on 1024 simulated ranks allocates nothing).
# A copy of a phantom copies nothing, but on a simulated host it costs what the copy would: the
# simulator sets `local_copy` (nbytes, call_s -> None, charging the running rank) while it runs.
local_copy: Callable[[int, float], None] | None = None
_ONE = np.zeros(1)


def phantom_call(call, nbytes: int) -> None:
    """What a move of phantoms costs a simulated host (nothing elsewhere, and `call` is not made):
    `call` makes the numpy call the real move makes, on stand-ins of one element a row, timed, so
    that its Python and numpy overhead is charged as the rank's own (at the host's `numpy_scale`: a
    call among other ranks' costs more than in a loop), and the bytes it would move at the copy rate."""
    if local_copy is None:
        return
    t0 = time.thread_time()
    call()
    local_copy(nbytes, time.thread_time() - t0)


def _copied(x: np.ndarray) -> np.ndarray:
    phantom_call(_ONE.copy, x.size * x.itemsize)
    return phantom(x.size, x.dtype)


def flat_copy(x: np.ndarray) -> np.ndarray:
    """A new C-contiguous 1-d copy of `x`: the result buffer every algorithm reduces into."""
    if type(x) is not np.ndarray:
        return np.array(x, copy=True, order="C").reshape(-1)
    if x.ndim != 1:
        return x.copy().reshape(-1)  # a C-ordered copy, flattened as a view
    return _copied(x) if x.strides[0] == 0 and x.size > 1 else x.copy()


def flat(x: np.ndarray) -> np.ndarray:
    """`x` as a 1-d C-contiguous array, copied only if it is not one already."""
    return x if is_phantom(x) else np.ascontiguousarray(x).reshape(-1)


def empty(count: int, like: np.ndarray) -> np.ndarray:
    """An uninitialised 1-d array of `count` elements of `like`'s dtype."""
    return phantom(count, like.dtype) if is_phantom(like) else np.empty(count, dtype=like.dtype)


def copy(x: np.ndarray) -> np.ndarray:
    return _copied(x) if is_phantom(x) else x.copy()


def local_copy_cost(nbytes: int) -> None:
    """What a local copy of `nbytes` costs a simulated host (nothing elsewhere): for a move of a
    phantom, which moves nothing."""
    if local_copy is not None and nbytes:
        local_copy(nbytes, 0.0)


def copy_into(out: np.ndarray, x: np.ndarray) -> None:
    """out[...] = x (same length): a local move of an algorithm's own block. Into a phantom it moves
    nothing and costs, on a simulated host, what the copy would."""
    if is_phantom(out) or is_phantom(x):
        phantom_call(lambda: np.copyto(_ONE, _ONE), x.size * x.itemsize)
        return
    np.copyto(out, x)


def work_buffer(x: np.ndarray, inplace: bool) -> np.ndarray:
    """The flat buffer an algorithm reduces into: a new copy of `x`, or with `inplace` `x`'s own
    memory (nccl-tests' in-place: the send and receive buffers are one)."""
    if not inplace:
        return flat_copy(x)
    if type(x) is np.ndarray and x.flags.carray:  # C-contiguous, aligned, writable: one flag read
        return x if x.ndim == 1 else x.reshape(-1)
    flags = x.flags if isinstance(x, np.ndarray) else None
    if flags is not None and flags.c_contiguous and flags.writeable:  # (a phantom is not contiguous)
        return x if x.ndim == 1 else x.reshape(-1)
    if flags is not None and is_phantom(x):
        return x
    raise UsageError("in-place all-reduce needs a writable C-contiguous numpy array")


class ChunkBounds(tuple[tuple[int, int], ...]):
    """[start, stop) of `num_chunks` near-equal chunks covering `count` elements, some maybe empty:
    a tuple of pairs, one per (count, num_chunks) shared by every rank that asks (the N ranks of a
    simulated world would otherwise hold N bounds each, N^2 at 1024), indexed without a Python call."""

    __slots__ = ()

    def __new__(cls, count: int, num_chunks: int):
        return _chunk_bounds(cls, count, num_chunks)


@functools.lru_cache(maxsize=4)  # a sweep uses one at a time; one for 65536 ranks is 17 MB
def _chunk_bounds(cls, count: int, n: int) -> ChunkBounds:
    return tuple.__new__(cls, ((i * count // n, (i + 1) * count // n) for i in range(n)))


def segment_bounds(start: int, stop: int, segment_elems: int) -> list[tuple[int, int]]:
    """Cut [start, stop) into segments of at most `segment_elems`; one empty segment if empty.

    Both sides of a transfer compute the same list from the same chunk bounds, so a receiver
    knows how many messages to expect without any extra header.
    """
    if stop <= start:
        return [(start, start)]
    if stop - start <= segment_elems:  # one segment: most messages, without building a range
        return [(start, stop)]
    step = max(1, segment_elems)
    return [(a, min(a + step, stop)) for a in range(start, stop, step)]


def segment_elems_for(segment_bytes: int, itemsize: int) -> int:
    return max(1, segment_bytes // max(1, itemsize))


def packed_bounds(counts) -> tuple[tuple[int, int], ...]:
    """[start, stop) of blocks of `counts` elements laid end to end (MPI's displacements of a packed
    buffer: torch's split sizes); an all-to-all's equal blocks are `packed_bounds([c] * N)`."""
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return tuple(out)
