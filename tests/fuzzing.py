"""Seeded garbage for the fuzz tests: data-plane messages (one or more frames) that are not
well-formed messages of wire.py, and control messages that are not ours. Nearly-valid frames (a
real header with one thing wrong) find more bugs than random bytes, so most are built that way."""

import json
import random
import struct

import numpy as np

from playground.comm import wire

DTYPES = ["<f4", "<f8", "<i8", "|u1", "|b1", "<c16"]
BAD_DTYPES = [b"|O", b"zz", b"\xff\xfe", b"<f4,<O", b"(2,)f8", b"|S0", b"<f3", b"", b"<M8[Q]"]


def header(
    rng: random.Random, kind: int, src: int, ndim: int | None = None, dtype: bytes | None = None
) -> bytes:
    ndim = rng.randint(0, 3) if ndim is None else ndim
    shape = [rng.randint(0, 5) for _ in range(min(ndim, 32))]
    dt = dtype if dtype is not None else rng.choice(DTYPES).encode()
    raw = struct.pack("<HiBB8s", src, rng.randint(-3, 10), kind, ndim, dt.ljust(8, b"\0")[:8])
    return raw + struct.pack(f"<{len(shape)}q", *shape)


def data_message(rng: random.Random, num_ranks: int) -> list[bytes]:
    """One malformed data-plane message (a list of frames)."""
    src = rng.randrange(num_ranks)
    choice = rng.randrange(12)
    if choice == 0:  # random bytes
        return [rng.randbytes(rng.randint(0, 40))]
    if choice == 1:  # truncated header
        return [header(rng, wire.KIND_INLINE, src)[: rng.randint(0, 15)]]
    if choice == 2:  # unknown kind
        return [header(rng, rng.randint(5, 255), src)]
    if choice == 3:  # ndim over 32
        return [header(rng, wire.KIND_ARRAY_FRAME, src, ndim=rng.randint(33, 255)), b"x"]
    if choice == 4:  # a dtype that is not one, or holds objects
        return [header(rng, wire.KIND_INLINE, src, ndim=1, dtype=rng.choice(BAD_DTYPES))]
    if choice == 5:  # inline payload of the wrong size
        return [header(rng, wire.KIND_INLINE, src, ndim=1) + rng.randbytes(rng.choice([1, 3, 7, 100]))]
    if choice == 6:  # array header without its payload frame
        return [header(rng, wire.KIND_ARRAY_FRAME, src)]
    if choice == 7:  # array payload of the wrong size
        h = wire.encode_header(src, 1, wire.KIND_ARRAY_FRAME, np.dtype("<f8"), (4,))
        return [h, rng.randbytes(rng.choice([0, 8, 31, 33, 64]))]
    if choice == 8:  # too many frames
        good = wire.encode_inline(src, 1, np.arange(2, dtype=np.float32))
        return [good] + [rng.randbytes(4) for _ in range(rng.randint(1, 3))]
    if choice == 9:  # a sender outside the run
        return [wire.encode_inline(rng.randint(num_ranks, 65535), 1, np.arange(2, dtype=np.int64))]
    if choice == 10:  # shared-memory kinds over ZeroMQ
        return [header(rng, rng.choice([wire.KIND_SHM, wire.KIND_JSON_SHM]), src), b"{}"]
    h = wire.encode_header(src, 1, wire.KIND_JSON, np.dtype("u1"), ())  # object header, body missing
    return [h]


def control_message(rng: random.Random, num_ranks: int) -> list[bytes]:
    """One control message (frames after the DEALER's identity) that the coordinator must ignore."""
    choice = rng.randrange(8)
    if choice == 0:
        return [rng.randbytes(rng.randint(0, 60))]
    if choice == 1:
        return [json.dumps(rng.choice([1, "x", None, [1, 2], 3.5, True])).encode()]
    if choice == 2:
        return [json.dumps({"type": rng.choice(["hello", "", 5, None, "registerr"])}).encode()]
    if choice == 3:  # known types with fields of the wrong type
        msg = rng.choice(
            [
                {"type": "register", "rank": "0", "endpoint": "tcp://x:1"},
                {"type": "register", "rank": 0},
                {"type": "done", "rank": 1.5},
                {"type": "done", "rank": True, "result": {}},
                {"type": "clock", "rank": 0, "seq": "a", "t_us": 1},
                {"type": "error", "rank": 0, "message": 5},
                {"type": "progress", "done": "x", "total": 3},
                {"type": "done", "rank": 0, "result": [1, 2]},
            ]
        )
        return [json.dumps(msg).encode()]
    if choice == 4:  # well-formed, but not from that rank's control socket
        msg = rng.choice(
            [
                {"type": "done", "rank": rng.randrange(num_ranks), "result": {}},
                {"type": "error", "rank": rng.randrange(num_ranks), "message": "spoofed"},
                {"type": "register", "rank": rng.randrange(num_ranks), "endpoint": "tcp://127.0.0.1:9"},
                {"type": "clock", "rank": 0, "seq": 1, "t_us": 0.0},
            ]
        )
        return [json.dumps(msg).encode()]
    if choice == 5:  # several frames
        return [b"{}", rng.randbytes(3)]
    if choice == 6:  # unterminated, or nested deeper than the JSON parser recurses
        n = rng.randint(1, 100_000)
        return [b"[" * n + b"]" * rng.choice([0, n])]
    return [("\udcff" * 3).encode("utf-8", "surrogatepass")]
