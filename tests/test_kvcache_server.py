"""KVServer.handle without sockets: reads exact under random interleavings of several clients
(checked against a plain-Python model of each sequence), invariants after every op, error
replies, leases."""

import random

import numpy as np
import pytest

from playground.kvcache.server import protocol as P
from playground.kvcache.server.kv_ops import KVServer

WIDTH = 3


class Clock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self):
        return self.now_s


def call(server, client, op, kv=None, **fields):
    header, out = P.decode_reply(server.handle(client, P.encode_request(op, kv, **fields)), server.width)
    return header, out


def ok(server, client, op, kv=None, **fields):
    header, out = call(server, client, op, kv, **fields)
    assert header["ok"], header
    return header, out


def prefix_kv(tokens: list[int]) -> np.ndarray:
    """KV as a function of the token prefix, as a real model's is (needed by prefix caching)."""
    rows, h = [], 17
    for t in tokens:
        h = (h * 31 + t + 1) % 1_000_003
        rows.append([h, h % 7, t])
    return np.asarray(rows, dtype=np.float32).reshape(-1, WIDTH)


@pytest.mark.parametrize(
    "policy,caching", [("paged", False), ("paged", True), ("contiguous", False), ("reserve_max", False)]
)
@pytest.mark.parametrize("seed", range(4))
def test_random_interleavings_read_exactly_what_was_written(policy, caching, seed):
    rng = random.Random(seed)
    server = KVServer(
        policy,
        capacity_tokens=160,
        block_size=4,
        width=WIDTH,
        enable_prefix_caching=caching,
        max_new_tokens=12,
        growth=1.5,
        check_invariants=True,
    )
    clients = [b"A", b"B", b"C"]
    model: dict[int, list] = {}  # seq_id -> [client, tokens, kv rows (np)]
    counts = {"oom": 0, "cow": 0}
    for _ in range(400):
        client = rng.choice(clients)
        mine = [s for s, m in model.items() if m[0] == client]
        op = rng.choice(["create", "create", "append", "append", "fork", "read", "free"])
        if op == "create" or not mine:
            n = rng.randint(1, 14)
            tokens = [rng.randint(0, 1) for _ in range(n)]
            kv = prefix_kv(tokens)
            extra = {"tokens": tokens} if caching else {}
            h, _ = call(server, client, "create", kv, num_tokens=n, **extra)
            if h["ok"]:
                model[h["seq_id"]] = [client, tokens, kv]
            else:
                assert h["error"] == P.OUT_OF_MEMORY
                counts["oom"] += 1
        elif op == "append":
            seqs = rng.sample(mine, rng.randint(1, len(mine)))
            ns = [rng.randint(0, 5) for _ in seqs]
            new = [
                np.asarray(rng.choices(range(1000), k=n * WIDTH), np.float32).reshape(n, WIDTH) for n in ns
            ]
            h, _ = call(server, client, "append", np.concatenate(new), seq_ids=seqs, num_tokens=ns)
            if h["ok"]:
                for s, rows in zip(seqs, new, strict=True):
                    model[s][2] = np.concatenate([model[s][2], rows])
                assert h["lengths"] == [len(model[s][2]) for s in seqs]
            else:
                assert h["error"] == P.OUT_OF_MEMORY
                counts["oom"] += 1
        elif op == "fork":
            parent = rng.choice(mine)
            h, _ = call(server, client, "fork", seq_id=parent, num_children=rng.randint(1, 3))
            if h["ok"]:
                for c in h["child_ids"]:
                    model[c] = [client, list(model[parent][1]), model[parent][2].copy()]
            else:
                assert h["error"] == P.OUT_OF_MEMORY and policy != "paged"
        elif op == "read":
            s = rng.choice(mine)
            h, kv = ok(server, client, "read", seq_id=s)
            assert np.array_equal(kv, model[s][2]), f"seq {s} read back wrong"
        else:
            gone = rng.sample(mine, rng.randint(1, len(mine)))
            ok(server, client, "free", seq_ids=gone)
            for s in gone:
                del model[s]
    for s, (client, _, kv) in model.items():  # every survivor, once more, then free all
        assert np.array_equal(ok(server, client, "read", seq_id=s)[1], kv)
    for client in clients:
        ok(server, client, "free", seq_ids=[s for s, m in model.items() if m[0] == client])
    st = ok(server, b"A", "stats")[0]
    assert st["live_seqs"] == 0 and st["allocated_slots"] == 0 and st["used_slots"] == 0
    assert counts["oom"] > 0  # the pool was small enough to be full sometimes
    if policy == "paged":
        assert st["cow_copies"] > 0


def _forked_pair(caching: bool):
    """A paged server, a parent of 6 tokens (a full block of 4 and a partial one of 2) and its
    forked child, sharing both blocks."""
    server = KVServer(
        "paged",
        capacity_tokens=64,
        block_size=4,
        width=WIDTH,
        enable_prefix_caching=caching,
        check_invariants=True,
    )
    tokens = [0, 1, 1, 0, 1, 0]
    extra = {"tokens": tokens} if caching else {}
    parent = ok(server, b"A", "create", prefix_kv(tokens), num_tokens=6, **extra)[0]["seq_id"]
    (child,) = ok(server, b"A", "fork", seq_id=parent, num_children=1)[0]["child_ids"]
    return server, parent, child, prefix_kv(tokens)


def _rows(first: int, n: int) -> np.ndarray:
    return np.arange(first, first + n * WIDTH, dtype=np.float32).reshape(n, WIDTH)


def _cow_copies(server) -> int:
    return ok(server, b"A", "stats")[0]["cow_copies"]


@pytest.mark.parametrize("caching", [False, True])
def test_a_forked_child_appending_twice_copies_the_shared_partial_block_once(caching):
    server, parent, child, prompt = _forked_pair(caching)
    assert _cow_copies(server) == 0
    first, second, mine = _rows(100, 1), _rows(200, 3), _rows(300, 1)
    ok(server, b"A", "append", first, seq_ids=[child], num_tokens=[1])
    assert _cow_copies(server) == 1  # the child got its own copy of the partial block
    ok(server, b"A", "append", second, seq_ids=[child], num_tokens=[3])  # fills it, opens another
    assert _cow_copies(server) == 1  # its last block is its own: no second copy
    ok(server, b"A", "append", mine, seq_ids=[parent], num_tokens=[1])
    assert _cow_copies(server) == 1  # the parent holds the original alone now: written in place
    assert np.array_equal(ok(server, b"A", "read", seq_id=parent)[1], np.concatenate([prompt, mine]))
    assert np.array_equal(ok(server, b"A", "read", seq_id=child)[1], np.concatenate([prompt, first, second]))


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("order", ["parent first", "child first"])
def test_parent_and_child_appending_in_one_batch_copy_the_shared_block_once(caching, order):
    server, parent, child, prompt = _forked_pair(caching)
    seqs = [parent, child] if order == "parent first" else [child, parent]
    new = {parent: _rows(100, 1), child: _rows(200, 2)}
    h, _ = ok(
        server,
        b"A",
        "append",
        np.concatenate([new[s] for s in seqs]),
        seq_ids=seqs,
        num_tokens=[len(new[s]) for s in seqs],
    )
    assert h["lengths"] == [6 + len(new[s]) for s in seqs]
    assert _cow_copies(server) == 1  # the first writer copies; the second is then the last holder
    assert ok(server, b"A", "stats")[0]["used_blocks"] == 3  # the full block shared, two partial ones
    for s in (parent, child):
        assert np.array_equal(ok(server, b"A", "read", seq_id=s)[1], np.concatenate([prompt, new[s]]))


def test_errors_name_the_problem_and_the_server_goes_on():
    server = KVServer("paged", capacity_tokens=64, block_size=16, width=WIDTH)
    h = call(server, b"A", "read", seq_id=42)[0]
    assert h == {
        "ok": False,
        "id": None,
        "error": P.UNKNOWN_SEQUENCE,
        "message": h["message"],
        "server": server.instance_id,
    }
    assert "no sequence 42" in h["message"]
    h = call(server, b"A", "create", np.zeros((2, WIDTH + 1), np.float32), num_tokens=2, id=7)[0]
    assert h["error"] == P.BAD_KV_SHAPE and h["id"] == 7 and "expected 2 x 3 float32" in h["message"]
    h = call(server, b"A", "create", np.zeros((80, WIDTH), np.float32), num_tokens=80)[0]
    assert h["error"] == P.OUT_OF_MEMORY and h["fits_when_empty"] is False
    frames = server.handle(b"A", [b"not json"])
    assert P.decode_reply(frames)[0]["error"] == P.BAD_FRAME
    h = call(server, b"A", "create", np.zeros((1, WIDTH), np.float32), num_tokens=0)[0]
    assert h["error"] == P.BAD_REQUEST and "'num_tokens' must be an integer >= 1" in h["message"]
    s = ok(server, b"A", "create", np.zeros((5, WIDTH), np.float32), num_tokens=5)[0]["seq_id"]
    h = call(server, b"A", "append", np.zeros((1, WIDTH), np.float32), seq_ids=[s, 99], num_tokens=[1, 0])[0]
    assert h["error"] == P.UNKNOWN_SEQUENCE
    h = call(server, b"A", "free", seq_ids=[s, 99])[0]
    assert h["error"] == P.UNKNOWN_SEQUENCE
    assert ok(server, b"A", "read", seq_id=s)[0]["num_tokens"] == 5  # a refused free freed nothing
    st = ok(server, b"A", "stats")[0]
    assert st["errors"][P.UNKNOWN_SEQUENCE] == 3 and st["refused"] == 1


def test_out_of_memory_then_admitted_after_a_free():
    server = KVServer("paged", capacity_tokens=32, block_size=16, width=WIDTH)
    a = ok(server, b"A", "create", np.zeros((32, WIDTH), np.float32), num_tokens=32)[0]["seq_id"]
    h = call(server, b"B", "create", np.ones((3, WIDTH), np.float32), num_tokens=3)[0]
    assert h["error"] == P.OUT_OF_MEMORY and h["fits_when_empty"] is True
    ok(server, b"A", "free", seq_ids=[a])
    b = ok(server, b"B", "create", np.ones((3, WIDTH), np.float32), num_tokens=3)[0]["seq_id"]
    assert np.array_equal(ok(server, b"B", "read", seq_id=b)[1], np.ones((3, WIDTH), np.float32))


def test_reserve_max_refuses_past_the_reservation():
    server = KVServer("reserve_max", capacity_tokens=100, block_size=4, width=WIDTH, max_new_tokens=4)
    s = ok(server, b"A", "create", np.zeros((2, WIDTH), np.float32), num_tokens=2, max_new_tokens=1)[0][
        "seq_id"
    ]
    h = call(server, b"A", "append", np.zeros((2, WIDTH), np.float32), seq_ids=[s], num_tokens=[2])[0]
    assert h["error"] == P.OUT_OF_MEMORY and h["fits_when_empty"] is False
    assert "reserved maximum" in h["message"]


def test_lease_expiry_frees_a_vanished_clients_sequences_only():
    clock = Clock()
    server = KVServer(
        "paged",
        capacity_tokens=64,
        block_size=4,
        width=WIDTH,
        lease_s=5.0,
        clock=clock,
        check_invariants=True,
    )
    a = ok(server, b"A", "create", np.zeros((6, WIDTH), np.float32), num_tokens=6)[0]["seq_id"]
    kids = ok(server, b"A", "fork", seq_id=a, num_children=2)[0]["child_ids"]
    b = ok(server, b"B", "create", np.ones((3, WIDTH), np.float32), num_tokens=3)[0]["seq_id"]
    clock.now_s = 4.0
    ok(server, b"B", "ping")  # B renews; A stays silent
    assert server.expire_leases() == []
    clock.now_s = 5.5
    assert sorted(server.expire_leases()) == sorted([a, *kids])
    server.policy.check_invariants()
    st = ok(server, b"B", "stats")[0]
    assert st["live_seqs"] == 1 and st["expired_seqs"] == 3 and st["used_blocks"] == 1
    assert call(server, b"A", "read", seq_id=a)[0]["error"] == P.UNKNOWN_SEQUENCE
    assert ok(server, b"B", "read", seq_id=b)[0]["num_tokens"] == 3


def test_overlapping_move_copies_exactly():
    server = KVServer("contiguous", capacity_tokens=30, block_size=4, width=WIDTH, growth=1.0)
    kv0, kv1 = np.full((10, WIDTH), 7, np.float32), np.arange(10 * WIDTH, dtype=np.float32).reshape(10, WIDTH)
    s0 = ok(server, b"A", "create", kv0, num_tokens=10)[0]["seq_id"]
    s1 = ok(server, b"A", "create", kv1, num_tokens=10)[0]["seq_id"]
    ok(server, b"A", "free", seq_ids=[s0])
    more = np.full((15, WIDTH), -1, np.float32)
    ok(server, b"A", "append", more, seq_ids=[s1], num_tokens=[15])  # moves [10,20) -> [0,25)
    assert server.policy.runs[s1] == (0, 25)
    assert np.array_equal(ok(server, b"A", "read", seq_id=s1)[1], np.concatenate([kv1, more]))
