"""Encoding of data-plane message headers: pure functions, no sockets.

A data message is two frames: a fixed-layout header and the array's raw bytes (sent zero-copy).
Header: src u16, tag i32, kind u8, ndim u8, dtype 8-byte str (numpy `dtype.str`), shape i64 x ndim.
`kind` lets other payloads share the layout: ARRAY (bytes follow in frame 2), JSON (frame 2 is
UTF-8 JSON, for small control objects; pickle never touches the wire), SHM (frame 2 is a
descriptor of a shared-memory slot holding the bytes).
"""

import struct

import numpy as np

KIND_ARRAY = 0
KIND_JSON = 1
KIND_SHM = 2

_FIXED = struct.Struct("<HiBB8s")
SUPPORTED_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                    "float16", "float32", "float64", "bool")


def encode_header(src: int, tag: int, kind: int, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    return _FIXED.pack(src, tag, kind, len(shape), dtype.str.encode()) + struct.pack(f"<{len(shape)}q", *shape)


def decode_header(buf: bytes) -> tuple[int, int, int, np.dtype, tuple[int, ...]]:
    """(src, tag, kind, dtype, shape); ValueError on a malformed header."""
    if len(buf) < _FIXED.size:
        raise ValueError(f"header too short: {len(buf)} bytes")
    src, tag, kind, ndim, dt = _FIXED.unpack_from(buf)
    if len(buf) != _FIXED.size + 8 * ndim:
        raise ValueError(f"header length {len(buf)} does not match ndim {ndim}")
    shape = struct.unpack_from(f"<{ndim}q", buf, _FIXED.size)
    return src, tag, kind, np.dtype(dt.rstrip(b"\0").decode()), tuple(shape)
