"""What the coordinator takes as a control message, and why it ignores the rest."""

import json

import pytest

from playground.rendezvous.messages import MalformedControl, parse_control

RANK1 = b"rank-1"


def frames(msg, ident=RANK1) -> list[bytes]:
    return [ident, json.dumps(msg).encode()]


def test_a_ranks_messages_are_taken():
    done = {"type": "done", "rank": 1, "result": {"x": 1}}
    assert parse_control(frames(done)) == done
    assert parse_control(frames({"type": "progress", "done": 3, "total": None}, b"anyone"))["done"] == 3


@pytest.mark.parametrize(
    "parts,why",
    [
        ([RANK1, b"{}", b"{}"], "2 frames instead of 1"),
        ([RANK1, b"\xff"], "not JSON"),
        ([RANK1, b"[" * 100_000 + b"]" * 100_000], "not JSON"),
        (frames([1, 2]), "not a JSON object"),
        (frames({"type": "hello"}), "unknown type 'hello'"),
        (frames({"type": "register", "rank": 1}), "register without 'endpoint'"),
        (frames({"type": "done", "rank": True}), "done with rank = 'True'"),
        (frames({"type": "error", "rank": 1, "message": 5}), "error with message = '5'"),
        (frames({"type": "done", "rank": 2}), "done for rank 2 from a socket that is not rank 2's"),
    ],
)
def test_what_is_not_ours_is_refused_with_the_reason(parts, why):
    with pytest.raises(MalformedControl, match=why.replace("[", r"\[")):
        parse_control(parts)
