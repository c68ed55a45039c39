import random
import re
import struct

import fuzzing
import numpy as np
import pytest
import zmq

from playground.comm import wire
from playground.comm.world import open_world
from playground.core.errors import WireError


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 1, 7)])
def test_header_roundtrip(dtype, shape):
    h = wire.encode_header(63, -10, wire.KIND_ARRAY_FRAME, np.dtype(dtype), shape)
    assert wire.decode_header(h) == (63, -10, wire.KIND_ARRAY_FRAME, np.dtype(dtype), shape)


def test_malformed_header_is_rejected():
    h = wire.encode_header(1, 2, wire.KIND_ARRAY_FRAME, np.dtype("f4"), (3,))
    with pytest.raises(ValueError):
        wire.decode_header(h[:-1])
    with pytest.raises(ValueError):
        wire.decode_header(b"xx")


# -- malformed frames: always a WireError saying what was wrong -------------------------------------
def _header(src=1, tag=2, kind=wire.KIND_ARRAY_FRAME, ndim=1, dt=b"<f4", shape=(3,)) -> bytes:
    return struct.pack("<HiBB8s", src, tag, kind, ndim, dt) + struct.pack(f"<{len(shape)}q", *shape)


@pytest.mark.parametrize(
    "buf,num_ranks,expect",
    [
        (b"", None, "header too short: 0 bytes"),
        (_header(kind=9), None, "unknown kind 9"),
        (_header(ndim=33, shape=()), None, "ndim 33"),
        (_header(ndim=2), None, "does not match ndim 2"),
        (_header(dt=b"|O"), None, "cannot travel as bytes"),
        (_header(dt=b"zz"), None, "is not a numpy dtype"),
        (_header(dt=b"\xff\xfe"), None, "is not a numpy dtype"),
        (_header(dt=b"(2,)f8"), None, "cannot travel as bytes"),
        (_header(shape=(-1,)), None, "negative dimension"),
        (_header(kind=wire.KIND_INLINE) + b"\0" * 11, None, "does not hold a float32 array of shape (3,)"),
        (_header(src=4), 4, "sent as rank 4, but the run has ranks 0..3"),
    ],
)
def test_each_malformed_header_is_a_wire_error(buf, num_ranks, expect):
    with pytest.raises(WireError, match=re.escape(expect)):
        wire.decode_header(buf, num_ranks)


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_headers_decode_or_raise_wire_error(seed):
    """Random and nearly-valid buffers: a tuple or a WireError, never any other exception."""
    rng = random.Random(seed)
    decoded = 0
    for _ in range(5000):
        frames = fuzzing.data_message(rng, 4)
        buf = frames[0] if rng.random() < 0.7 else bytes(rng.randbytes(rng.randint(0, 64)))
        try:
            wire.decode_header(buf, 4)
            decoded += 1
        except WireError:
            pass
    assert decoded < 5000


@pytest.fixture
def zmq_pair(tmp_path):
    """Two ranks' ZeroMQ transports (tcp) and a raw PUSH socket aimed at rank 1's data socket."""
    ctx = zmq.Context()
    transports = open_world("tcp", 2, str(tmp_path), ctx)
    raw = ctx.socket(zmq.PUSH)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(transports[1]._endpoints[1])
    yield transports, raw
    raw.close()
    for t in transports:
        t.close()
    ctx.term()


def _outcome(transport) -> str:
    """'none', 'message' or the WireError's text, from one receive (and reading its payload)."""
    try:
        msg = transport.receive(500)
        if msg is None:
            return "none"
        msg.array() if msg.kind == "array" else msg.obj()
        return "message"
    except WireError as e:
        return str(e)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "frames,expect",
    [
        ([b"\x01"], "header too short"),
        (
            [wire.encode_header(0, 1, wire.KIND_ARRAY_FRAME, np.dtype("f8"), (4,))],
            "without the payload frame",
        ),
        (
            [wire.encode_header(0, 1, wire.KIND_ARRAY_FRAME, np.dtype("f8"), (4,)), b"x" * 31],
            "a payload of 31 bytes",
        ),
        (
            [wire.encode_header(0, 1, wire.KIND_ARRAY_FRAME, np.dtype("f8"), (4,)), b"x" * 32, b"y"],
            "then 1 more frames",
        ),
        (
            [wire.encode_inline(0, 1, np.arange(2, dtype=np.int32)), b"z", b"z"],
            "2 frames after a one-frame message",
        ),
        ([wire.encode_header(0, 1, wire.KIND_JSON, np.dtype("u1"), ())], "without the payload frame"),
        (
            [wire.encode_header(0, 1, wire.KIND_JSON, np.dtype("u1"), ()), b"{}", b"{}"],
            "frames after an object",
        ),
        ([wire.encode_header(0, 1, wire.KIND_SHM, np.dtype("u1"), ()), b"x"], "shared-memory message"),
        (
            [wire.encode_inline(7, 1, np.arange(2, dtype=np.int32))],
            "sent as rank 7, but the run has ranks 0..1",
        ),
    ],
)
def test_transport_turns_each_malformed_message_into_one_wire_error(zmq_pair, frames, expect):
    transports, raw = zmq_pair
    raw.send_multipart(frames)
    got = _outcome(transports[1])
    assert expect in got and got.startswith("rank 1: malformed message on its data socket tcp://"), got
    transports[0].send(1, 5, np.arange(3.0))  # the socket still works, nothing of the bad message is left
    msg = transports[1].receive(2000)
    assert (msg.src, msg.tag, msg.array().tolist()) == (0, 5, [0.0, 1.0, 2.0])


@pytest.mark.timeout(60)
def test_thousands_of_fuzzed_messages_never_wedge_the_transport(zmq_pair):
    transports, raw = zmq_pair
    rng = random.Random(1234)
    for _ in range(3000):
        raw.send_multipart(fuzzing.data_message(rng, 2))
    outcomes = []
    while (got := _outcome(transports[1])) != "none":
        outcomes.append(got)
    errors = [o for o in outcomes if o not in ("message",)]
    assert len(errors) >= 2900 and all(o.startswith("rank 1: malformed message") for o in errors)
    transports[0].send(1, 5, np.arange(70_000, dtype=np.float32))  # a zero-copy array still arrives whole
    out = np.empty(70_000, np.float32)
    transports[1].receive(2000).copy_into(out)
    assert out[-1] == 69_999
