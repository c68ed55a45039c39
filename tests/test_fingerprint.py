"""The scenario fingerprint every rank sends at registration, and the one line a mismatch makes."""

from playground.config.fingerprint import differing_keys, fingerprint, flatten, mismatch_message
from playground.config.scenario import load_scenario


def test_same_resolved_scenario_same_fingerprint_whatever_the_key_order():
    a = load_scenario("ring", ranks=4, transport="tcp", overrides=["params.iters=3"]).to_dict()
    b = load_scenario("ring", ranks=4, transport="tcp", overrides=["params.iters=3"]).to_dict()
    assert fingerprint(a) == fingerprint(dict(reversed(list(b.items()))))
    c = load_scenario("ring", ranks=4, transport="tcp", overrides=["params.iters=4"]).to_dict()
    assert fingerprint(a) != fingerprint(c)
    assert differing_keys(a, c) == ["params.iters"]


def test_flatten_and_differing_keys():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
    assert differing_keys({"a": 1, "p": {"x": 1}}, {"a": 1, "p": {"x": 2, "y": 0}}) == ["p.x", "p.y"]


def test_mismatch_message_names_the_ranks_and_the_first_ones_keys():
    s0 = {"name": "ring", "params": {"iters": 3, "sizes": [8]}}
    s1 = {"name": "ring", "params": {"iters": 5, "sizes": [8, 16]}}
    fps = {0: fingerprint(s0), 1: fingerprint(s1), 2: fingerprint(s0), 3: fingerprint(s1)}
    msg = mismatch_message(fps, {0: s0, 1: s1, 2: s0, 3: s1})
    assert msg.startswith("ranks 1, 3 run another scenario than rank 0: ")
    assert "params.iters: rank 0 has 3, rank 1 has 5; params.sizes: rank 0 has [8], rank 1 has [8, 16]" in msg
    assert mismatch_message({0: "x", 1: "x"}, {}) is None
