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
    assert P.get_int(h, "max_new_tokens", optional=True) is None
    with pytest.raises(P.ProtocolError, match="list of integers"):
        P.get_int_list({"op": "free", "seq_ids": [1, True]}, "seq_ids")
