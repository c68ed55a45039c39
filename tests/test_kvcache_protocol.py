"""Wire format: header JSON + raw float32 KV; malformed input raises a coded ProtocolError."""

import json

import numpy as np
import pytest

from playground.kvcache.server import protocol as P


def test_request_round_trip_keeps_kv_bytes_exact():
    kv = np.arange(12, dtype=np.float32).reshape(3, 4)
    frames = P.encode_request("create", kv, id=5, num_tokens=3)
    assert json.loads(frames[0]) == {"op": "create", "id": 5, "num_tokens": 3}
    req = P.decode_request(frames)
    assert req.op == "create" and np.array_equal(P.kv_array(req, 3, 4), kv)


def test_reply_round_trip():
    kv = np.ones((2, 3), dtype=np.float32)
    header, out = P.decode_reply(P.encode_reply({"ok": True, "id": 1}, kv), width=3)
    assert header == {"ok": True, "id": 1} and out.shape == (2, 3)


@pytest.mark.parametrize(
    "frames,code",
    [
        ([], P.BAD_FRAME),
        ([b"a", b"b", b"c"], P.BAD_FRAME),
        ([b"\xff\xfe"], P.BAD_FRAME),
        ([b"[1, 2]"], P.BAD_FRAME),
        ([b'{"id": 1}'], P.BAD_FRAME),
        ([b'{"op": "explode"}'], P.UNKNOWN_OP),
    ],
)
def test_malformed_frames(frames, code):
    with pytest.raises(P.ProtocolError) as e:
        P.decode_request(frames)
    assert e.value.code == code


def test_kv_shape_errors_say_what_was_expected():
    req = P.decode_request(P.encode_request("create", np.zeros((3, 5), np.float32), num_tokens=3))
    with pytest.raises(P.ProtocolError, match="expected 3 x 4 float32 = 48 bytes") as e:
        P.kv_array(req, 3, 4)
    assert e.value.code == P.BAD_KV_SHAPE
    with pytest.raises(P.ProtocolError, match="KV frame missing"):
        P.kv_array(P.decode_request(P.encode_request("create", num_tokens=3)), 3, 4)


def test_field_checks_name_the_field():
    h = {"op": "fork", "seq_id": "x"}
    with pytest.raises(P.ProtocolError, match="'seq_id' must be an integer >= 0, got 'x'"):
        P.get_int(h, "seq_id")
    with pytest.raises(P.ProtocolError, match="'num_children' must be an integer >= 1, got nothing"):
        P.get_int(h, "num_children", minimum=1)
    assert P.get_optional_int(h, "max_new_tokens") is None
    with pytest.raises(P.ProtocolError, match="list of integers"):
        P.get_int_list({"op": "free", "seq_ids": [1, True]}, "seq_ids")


DEEP = b'{"id": 9, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"


@pytest.mark.parametrize(
    "frames,code",
    [
        ([b'{"id": 9}'], P.BAD_FRAME),  # no op
        ([b'{"id": 9, "op": "launch"}'], P.UNKNOWN_OP),
        ([b'{"id": 9, "op": "ping"}', b"kv", b"extra"], P.BAD_FRAME),  # three frames
        ([b'{"id": 9, "op": "ping", "x": [1, 2'], P.BAD_FRAME),  # broken after the id
        ([DEEP], P.BAD_REQUEST),  # nested past the decoder's recursion: refused, not a server bug
    ],
    ids=["no-op", "unknown-op", "three-frames", "truncated", "too-deep"],
)
def test_every_malformed_request_is_answered_with_its_id(frames, code):
    """A client with several requests in flight matches an error reply by its id."""
    from playground.kvcache.server.kv_ops import KVServer

    server = KVServer("paged", capacity_tokens=64, block_size=16, width=4)
    header, _ = P.decode_reply(server.handle(b"A", frames), 4)
    assert (header["ok"], header["id"], header["error"]) == (False, 9, code), header
    assert header["server"] == server.instance_id and "\n" not in header["message"]


def test_ping_says_the_limits():
    from playground.kvcache.server.kv_ops import KVServer

    server = KVServer("paged", capacity_tokens=64, block_size=16, width=4, max_new_tokens=77)
    header, _ = P.decode_reply(server.handle(b"A", P.encode_request("ping", id=1)), 4)
    assert header["ok"] and header["max_new_tokens"] == 77 and "max_n" in header, header
