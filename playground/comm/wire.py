"""Encoding of data-plane message headers: pure functions, no sockets.

A data message starts with a fixed-layout header: src u16, tag i32, kind u8, ndim u8, dtype as an
8-byte string (numpy's `dtype.str`, or the name of a type numpy has no letter for: bfloat16,
core/dtypes.py), shape as i64 x ndim. `kind` says where the payload is:
INLINE       the array's bytes follow the header in the same frame (small arrays: one frame is
             cheaper than two)
ARRAY_FRAME  the array's bytes are the next frame (large arrays, sent zero-copy)
JSON         the next frame is UTF-8 JSON, for small control objects (pickle never touches the wire)
SHM          the payload is a descriptor of a shared-memory slot holding the bytes (shm.py)
JSON_SHM     as SHM, but the slot holds UTF-8 JSON (an object too large for one mailbox record)
STREAM       the payload is a descriptor of a window in the sender's ring that the array's bytes
             pass through cell by cell (shm_stream.py)
LENT         the payload is a descriptor of a marker in the sender's ring and where the array lies in
             the sender's memory, which the receiver reads from there (shm_lend.py)
(These say how a message travels; the communicator's KIND_ARRAY / KIND_OBJ, transport.py, say what
the receiver gets.)

On one host with shared memory, header and payload travel together as one mailbox record
(mailbox.py): `decode_record` splits them.

Anything that is not such a header (short, an unknown kind, ndim over 32, a dtype string numpy does
not know or that holds Python objects, a negative dimension, an inline payload of the wrong size, a
sender that is not a rank of the run) is a WireError saying what was wrong, never a crash.
"""

import math
import struct

import numpy as np

from playground.core.dtypes import resolve, wire_name
from playground.core.errors import WireError

KIND_ARRAY_FRAME = 0
KIND_JSON = 1
KIND_SHM = 2
KIND_INLINE = 3
KIND_JSON_SHM = 4
KIND_STREAM = 5
KIND_LENT = 6
KINDS = (KIND_ARRAY_FRAME, KIND_JSON, KIND_SHM, KIND_INLINE, KIND_JSON_SHM, KIND_STREAM, KIND_LENT)
MAX_NDIM = 32  # numpy's
_MAX_CACHED_DTYPES = 64  # a stream of distinct garbage dtypes must not grow the cache without bound

_FIXED = struct.Struct("<HiBB8s")
_DTYPES: dict[bytes, np.dtype] = {}
_DTYPE_STRS: dict[np.dtype, bytes] = {}


_SHAPE = [struct.Struct(f"<{n}q") for n in range(MAX_NDIM + 1)]


def encode_header(src: int, tag: int, kind: int, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    dt = _DTYPE_STRS.get(dtype)
    if dt is None:
        dt = _DTYPE_STRS[dtype] = wire_name(dtype)
    return _FIXED.pack(src, tag, kind, len(shape), dt) + _SHAPE[len(shape)].pack(*shape)


def header_size(ndim: int) -> int:
    return _FIXED.size + 8 * ndim


def decode_header(
    buf: bytes, num_ranks: int | None = None
) -> tuple[int, int, int, np.dtype, tuple[int, ...]]:
    """(src, tag, kind, dtype, shape); WireError (a ValueError) saying what is wrong with a malformed
    header, or with a sender outside 0..num_ranks-1. For INLINE messages the array's bytes start at
    `header_size(len(shape))`."""
    return _decode(buf, False, num_ranks)


def decode_record(
    buf: bytes, num_ranks: int | None = None
) -> tuple[int, int, int, np.dtype, tuple[int, ...], memoryview]:
    """(src, tag, kind, dtype, shape, payload) of a header followed by its payload in one buffer."""
    src, tag, kind, dtype, shape = _decode(buf, True, num_ranks)
    return src, tag, kind, dtype, shape, memoryview(buf)[header_size(len(shape)) :]


def _decode(
    buf: bytes, record: bool, num_ranks: int | None
) -> tuple[int, int, int, np.dtype, tuple[int, ...]]:
    if len(buf) < _FIXED.size:
        raise WireError(f"header too short: {len(buf)} bytes, at least {_FIXED.size}")
    src, tag, kind, ndim, dt = _FIXED.unpack_from(buf)
    if kind not in KINDS:
        raise WireError(f"unknown kind {kind} (known: {', '.join(map(str, KINDS))})")
    if ndim > MAX_NDIM:
        raise WireError(f"ndim {ndim} is over numpy's {MAX_NDIM}")
    end = _FIXED.size + 8 * ndim
    if len(buf) < end or (kind != KIND_INLINE and not record and len(buf) != end):
        raise WireError(f"header length {len(buf)} does not match ndim {ndim} (expected {end})")
    if num_ranks is not None and src >= num_ranks:
        raise WireError(f"sent as rank {src}, but the run has ranks 0..{num_ranks - 1}")
    shape = _SHAPE[ndim].unpack_from(buf, _FIXED.size)
    if any(d < 0 for d in shape):
        raise WireError(f"negative dimension in shape {shape}")
    dtype = _DTYPES.get(dt) or _parse_dtype(dt)
    if kind == KIND_INLINE and len(buf) != end + dtype.itemsize * math.prod(shape):
        raise WireError(f"inline message of {len(buf)} bytes does not hold a {dtype} array of shape {shape}")
    return src, tag, kind, dtype, shape


def _parse_dtype(dt: bytes) -> np.dtype:
    """A plain numpy dtype from its 8-byte `dtype.str` (or name: `wire_name`); never an object dtype (no pointers on the wire)."""
    try:
        dtype = resolve(dt.rstrip(b"\0").decode("ascii"))
    except (TypeError, ValueError, UnicodeDecodeError, SyntaxError):
        raise WireError(f"dtype {dt!r} is not a numpy dtype") from None
    if dtype.hasobject or dtype.itemsize == 0 or dtype.subdtype is not None:
        raise WireError(f"dtype {dt!r} ({dtype}) cannot travel as bytes")
    if len(_DTYPES) < _MAX_CACHED_DTYPES:
        _DTYPES[dt] = dtype
    return dtype


def encode_inline(src: int, tag: int, x: np.ndarray) -> bytes:
    """Header and bytes of a small contiguous array in one frame."""
    return encode_header(src, tag, KIND_INLINE, x.dtype, x.shape) + x.tobytes()


def record_header_size(buf) -> int:
    """Bytes of the header that starts `buf` (what `decode_record` splits off), read from its ndim
    byte alone: a transport can recognise a header it has decoded before without decoding it."""
    return _FIXED.size + 8 * buf[7]
