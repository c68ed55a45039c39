"""inspect's per-host view: which bytes crossed a host link and which stayed inside a host."""

from playground.commands.inspect import host_traffic


def send(peer: int, nbytes: int) -> dict:
    return {
        "ts": 0.0,
        "dur": 1.0,
        "name": "send",
        "cat": "send",
        "tid": 0,
        "args": {"peer": peer, "bytes": nbytes},
    }


def test_bytes_inside_a_host_and_over_each_link():
    placement = (0, 0, 1, 1)
    events = {
        0: [send(1, 100), send(2, 10)],  # inside h0; h0 -> h1
        1: [send(3, 20), {"ts": 0, "dur": 5.0, "name": "recv_wait", "cat": "wait", "tid": 0}],
        2: [send(3, 7)],  # inside h1
        3: [send(0, 1), send(9, 1000)],  # h1 -> h0; a peer outside the run is ignored
    }
    rows = host_traffic(events, placement)
    assert [(r["host"], r["ranks"], r["inside"], r["out"], r["in"], r["wait_us"]) for r in rows] == [
        ("h0", 2, 100, 30, 1, 5.0),
        ("h1", 2, 7, 1, 30, 0.0),
    ]
