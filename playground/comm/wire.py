"""Encoding of data-plane message headers: pure functions, no sockets.

A data message starts with a fixed-layout header: src u16, tag i32, kind u8, ndim u8, dtype as an
8-byte string (numpy `dtype.str`), shape as i64 x ndim. `kind` says where the payload is:
INLINE    the array's bytes follow the header in the same frame (small arrays: one frame is
          cheaper than two)
ARRAY     the array's bytes are the next frame (large arrays, sent zero-copy)
JSON      the next frame is UTF-8 JSON, for small control objects (pickle never touches the wire)
SHM       the payload is a descriptor of a shared-memory slot holding the bytes (shm.py)
JSON_SHM  as SHM, but the slot holds UTF-8 JSON (an object too large for one mailbox record)

On one host with shared memory, header and payload travel together as one mailbox record
(mailbox.py): `decode_record` splits them.
"""

import math
import struct

import numpy as np

KIND_ARRAY = 0
KIND_JSON = 1
KIND_SHM = 2
KIND_INLINE = 3
KIND_JSON_SHM = 4

_FIXED = struct.Struct("<HiBB8s")
_DTYPES: dict[bytes, np.dtype] = {}
_DTYPE_STRS: dict[np.dtype, bytes] = {}


_SHAPE = [struct.Struct(f"<{n}q") for n in range(33)]  # numpy's maximum ndim is 32


def encode_header(src: int, tag: int, kind: int, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    dt = _DTYPE_STRS.get(dtype)
    if dt is None:
        dt = _DTYPE_STRS[dtype] = dtype.str.encode()
    return _FIXED.pack(src, tag, kind, len(shape), dt) + _SHAPE[len(shape)].pack(*shape)


def header_size(ndim: int) -> int:
    return _FIXED.size + 8 * ndim


def decode_header(buf: bytes) -> tuple[int, int, int, np.dtype, tuple[int, ...]]:
    """(src, tag, kind, dtype, shape); ValueError on a malformed header. For INLINE messages the
    array's bytes start at `header_size(len(shape))`."""
    return _decode(buf, record=False)


def decode_record(buf: bytes) -> tuple[int, int, int, np.dtype, tuple[int, ...], memoryview]:
    """(src, tag, kind, dtype, shape, payload) of a header followed by its payload in one buffer."""
    src, tag, kind, dtype, shape = _decode(buf, record=True)
    return src, tag, kind, dtype, shape, memoryview(buf)[header_size(len(shape)) :]


def _decode(buf: bytes, record: bool) -> tuple[int, int, int, np.dtype, tuple[int, ...]]:
    if len(buf) < _FIXED.size:
        raise ValueError(f"header too short: {len(buf)} bytes")
    src, tag, kind, ndim, dt = _FIXED.unpack_from(buf)
    end = _FIXED.size + 8 * ndim
    if ndim > 32 or len(buf) < end or (kind != KIND_INLINE and not record and len(buf) != end):
        raise ValueError(f"header length {len(buf)} does not match ndim {ndim}")
    shape = _SHAPE[ndim].unpack_from(buf, _FIXED.size)
    dtype = _DTYPES.get(dt)
    if dtype is None:
        dtype = _DTYPES[dt] = np.dtype(dt.rstrip(b"\0").decode())
    if kind == KIND_INLINE and len(buf) != end + dtype.itemsize * math.prod(shape):
        raise ValueError(f"inline message of {len(buf)} bytes does not hold a {dtype} array of shape {shape}")
    return src, tag, kind, dtype, shape


def encode_inline(src: int, tag: int, x: np.ndarray) -> bytes:
    """Header and bytes of a small contiguous array in one frame."""
    return encode_header(src, tag, KIND_INLINE, x.dtype, x.shape) + x.tobytes()


def record_header_size(buf) -> int:
    """Bytes of the header that starts `buf` (what `decode_record` splits off), read from its ndim
    byte alone: a transport can recognise a header it has decoded before without decoding it."""
    return _FIXED.size + 8 * buf[7]
