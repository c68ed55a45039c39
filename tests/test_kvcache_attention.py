"""Attention over the pool: the pool's layout, both kernels against the dense reference, and the
server's `attend` for every policy, forks included, with its error replies."""

import numpy as np
import pytest

from playground.core.native import load_native
from playground.kvcache.engine.allocation import Copy
from playground.kvcache.engine.attention import RunTable, decode_attention, prefill_attention, run_table
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.server import protocol as P
from playground.kvcache.server.kv_ops import KVServer
from playground.transformer.generate import cached_attention

LAYOUT = KVLayout(layers=2, heads=3, head_dim=8)


def dense(q: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One query (H, hd) over all n tokens, in float64: the reference."""
    f = np.float64
    return cached_attention(q[None].astype(f), keys.astype(f), values.astype(f), len(keys) - 1)[0]


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def test_the_pool_keeps_each_layer_and_kind_in_a_plane_and_reads_back_the_wire_rows():
    pool = KVPool(10, LAYOUT.width, LAYOUT)
    rows = np.arange(3 * LAYOUT.width, dtype=np.float32).reshape(3, LAYOUT.width)
    pool.write([7, 2, 5], rows)
    assert np.array_equal(pool.read([7, 2, 5]), rows)
    # row layout (layers, 2, heads, head_dim): layer 1's values are the last quarter of a row
    per = LAYOUT.heads * LAYOUT.head_dim
    assert np.array_equal(pool.values(1)[2].ravel(), rows[1, 3 * per :])
    assert np.array_equal(pool.keys(0)[7].ravel(), rows[0, :per])
    assert pool.keys(1).shape == (10, 3, 8) and np.shares_memory(pool.keys(1), pool.planes)
    pool.copy([Copy(2, 3, 1), Copy(5, 6, 2)])
    assert np.array_equal(pool.read([3, 6]), rows[[1, 2]])
    opaque = KVPool(4, 3)  # any width without a layout: one plane, the old token-major array
    opaque.write([1], np.ones((1, 3), np.float32))
    assert opaque.planes.shape == (1, 4, 3) and opaque.read([1, 0]).tolist() == [[1, 1, 1], [0, 0, 0]]
    with pytest.raises(ValueError, match="width"):
        KVPool(4, 10, LAYOUT)


def random_tables(rng, lens, block_size, spare=5):
    """Block tables drawn at random from a pool with `spare` blocks more than needed."""
    need = [-(-n // block_size) for n in lens]
    perm = rng.permutation(sum(need) + spare).astype(np.int64)
    starts = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(need, out=starts[1:])
    return RunTable(perm[: starts[-1]], starts, np.asarray(lens, np.int64), block_size), len(
        perm
    ) * block_size


@pytest.mark.parametrize("kernel", ["native", "numpy"])
@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("streams", [0, 1, 3])
def test_decode_kernels_equal_dense_attention_paged_and_contiguous(kernel, block_size, streams):
    rng = np.random.default_rng(block_size)
    lens = [1, block_size, block_size + 1, 37, 100]
    paged, slots = random_tables(rng, lens, block_size)
    keys = rng.standard_normal((slots, 3, 8), dtype=np.float32)
    values = rng.standard_normal((slots, 3, 8), dtype=np.float32)
    q = rng.standard_normal((len(lens), 3, 8), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    contiguous = RunTable(starts, np.arange(len(lens) + 1, dtype=np.int64), np.asarray(lens, np.int64), 0)
    for runs in (paged, contiguous):
        out = decode_attention(q, keys, values, runs, kernel, streams)
        for i in range(len(lens)):
            sl = runs.slots(i)
            assert rel_err(out[i], dense(q[i], keys[sl], values[sl])) < 1e-5


def test_prefill_attention_is_causal_over_the_table():
    rng = np.random.default_rng(1)
    runs, slots = random_tables(rng, [11], 4)
    keys = rng.standard_normal((slots, 2, 4), dtype=np.float32)
    values = rng.standard_normal((slots, 2, 4), dtype=np.float32)
    q = rng.standard_normal((5, 2, 4), dtype=np.float32)  # the last 5 of 11 tokens are new
    out = prefill_attention(q, keys, values, runs, 0, first_position=6)
    sl = runs.slots(0)
    for j in range(5):
        visible = sl[: 6 + j + 1]
        assert rel_err(out[j], dense(q[j], keys[visible], values[visible])) < 1e-5


def test_the_native_kernel_refuses_what_would_read_outside_the_pool():
    native = load_native()
    keys = np.zeros((8, 1, 4), np.float32)
    q, out = np.zeros((1, 1, 4), np.float32), np.zeros((1, 1, 4), np.float32)
    one = np.array([0, 1], np.int64)
    with pytest.raises(IndexError, match="sequence 0: run 0"):
        native.paged_attention(q, keys, keys, np.array([2], np.int64), one, np.array([4], np.int64), 4, out)
    with pytest.raises(ValueError, match="table entries"):
        native.paged_attention(q, keys, keys, np.array([0], np.int64), one, np.array([5], np.int64), 4, out)
    with pytest.raises(IndexError, match="outside"):  # contiguous: start 6 + 4 tokens > 8 slots
        native.paged_attention(q, keys, keys, np.array([6], np.int64), one, np.array([4], np.int64), 0, out)
    with pytest.raises(ValueError, match="num_seqs, heads, head_dim"):
        native.paged_attention(
            q,
            np.zeros((8, 1, 2), np.float32),
            keys,
            np.array([0], np.int64),
            one,
            np.array([4], np.int64),
            4,
            out,
        )
    with pytest.raises(ValueError, match="streams"):
        native.paged_attention(
            q, keys, keys, np.array([0], np.int64), one, np.array([4], np.int64), 4, out, 99
        )


# -- the server's attend -------------------------------------------------------------------------


def call(server, client, op, data=None, **fields):
    frames = server.handle(client, P.encode_request(op, data, **fields))
    return P.decode_reply(frames)


def ok(server, client, op, data=None, **fields):
    header, out = call(server, client, op, data, **fields)
    assert header["ok"], header
    return header, out


def attend(server, seq_ids, layer, q):
    header, out = ok(server, b"A", "attend", q, seq_ids=seq_ids, layer=layer)
    return out.reshape(q.shape)


def reference(server, seq_id, layer, q):
    """Dense attention over the KV the client reads back (what it wrote)."""
    _, kv = ok(server, b"A", "read", seq_id=seq_id)
    rows = kv.reshape(-1, LAYOUT.layers, 2, LAYOUT.heads, LAYOUT.head_dim)
    return dense(q, rows[:, layer, 0], rows[:, layer, 1])


@pytest.mark.parametrize("policy", ["paged", "contiguous", "reserve_max"])
def test_attend_equals_dense_attention_on_what_was_written_forks_included(policy):
    rng = np.random.default_rng(0)
    server = KVServer(
        policy,
        capacity_tokens=4096,
        block_size=4,
        width=None,
        layout=LAYOUT,
        max_new_tokens=64,
        check_invariants=True,
    )
    kv = lambda n: rng.standard_normal((n, LAYOUT.width), dtype=np.float32)  # noqa: E731
    a = ok(server, b"A", "create", kv(10), num_tokens=10)[0]["seq_id"]
    b = ok(server, b"A", "create", kv(3), num_tokens=3)[0]["seq_id"]
    c1, c2 = ok(server, b"A", "fork", seq_id=a, num_children=2)[0]["child_ids"]
    ok(server, b"A", "append", kv(1 + 5 + 0), seq_ids=[c1, c2, a], num_tokens=[1, 5, 0])
    ok(server, b"A", "append", kv(2), seq_ids=[b], num_tokens=[2])
    seqs = [a, b, c1, c2]
    for layer in range(LAYOUT.layers):
        q = rng.standard_normal((len(seqs), LAYOUT.heads, LAYOUT.head_dim), dtype=np.float32)
        out = attend(server, seqs, layer, q)
        for i, s in enumerate(seqs):
            assert rel_err(out[i], reference(server, s, layer, q[i])) < 1e-5
    # a child sees the parent's prefix and its own tokens, not its sibling's
    _, parent_kv = ok(server, b"A", "read", seq_id=a)
    _, child_kv = ok(server, b"A", "read", seq_id=c2)
    parent_kv, child_kv = parent_kv.reshape(-1, LAYOUT.width), child_kv.reshape(-1, LAYOUT.width)
    assert np.array_equal(child_kv[:10], parent_kv) and len(child_kv) == 15
    header, _ = ok(server, b"A", "attend", np.zeros((1, 3, 8), np.float32), seq_ids=[c2], layer=1)
    assert header["lengths"] == [15] and header["heads"] == 3 and header["head_dim"] == 8


def test_attend_error_replies_and_the_server_goes_on():
    server = KVServer("paged", capacity_tokens=64, block_size=4, width=None, layout=LAYOUT)
    s = ok(server, b"A", "create", np.ones((2, LAYOUT.width), np.float32), num_tokens=2)[0]["seq_id"]
    q = np.ones((1, 3, 8), np.float32)
    h, _ = call(server, b"A", "attend", q, seq_ids=[s + 40], layer=0)
    assert h["error"] == P.UNKNOWN_SEQUENCE and "no sequence" in h["message"]
    h, _ = call(server, b"A", "attend", np.ones((1, 3, 7), np.float32), seq_ids=[s], layer=0)
    assert h["error"] == P.BAD_QUERY_SHAPE and "expected 1 x 3 x 8 float32 = 96 bytes" in h["message"]
    h, _ = call(server, b"A", "attend", None, seq_ids=[s], layer=0)
    assert h["error"] == P.BAD_QUERY_SHAPE and "missing" in h["message"]
    h, _ = call(server, b"A", "attend", q, seq_ids=[s], layer=2)
    assert h["error"] == P.BAD_REQUEST and "'layer' must be in [0, 2), got 2" in h["message"]
    h, _ = call(server, b"A", "attend", q, seq_ids=[], layer=0)
    assert h["error"] == P.BAD_REQUEST
    opaque = KVServer("paged", capacity_tokens=64, block_size=4, width=3)
    h, _ = call(opaque, b"A", "attend", q, seq_ids=[0], layer=0)
    assert h["error"] == P.BAD_REQUEST and "opaque KV of width 3" in h["message"]
    assert attend(server, [s], 0, q).shape == (1, 3, 8)  # still serving


def test_run_table_reads_each_policy_as_the_kernel_needs(tmp_path):
    server = KVServer("paged", capacity_tokens=64, block_size=4, width=None, layout=LAYOUT)
    s = ok(server, b"A", "create", np.ones((6, LAYOUT.width), np.float32), num_tokens=6)[0]["seq_id"]
    runs = run_table(server.policy, [s])
    assert runs.block_size == 4 and runs.seq_lens.tolist() == [6] and len(runs.table(0)) == 2
    assert runs.slots(0).tolist() == server.policy.slots(s).tolist()
    contiguous = KVServer("contiguous", capacity_tokens=64, block_size=4, width=None, layout=LAYOUT)
    s = ok(contiguous, b"A", "create", np.ones((6, LAYOUT.width), np.float32), num_tokens=6)[0]["seq_id"]
    runs = run_table(contiguous.policy, [s])
    assert runs.block_size == 0 and runs.slots(0).tolist() == contiguous.policy.slots(s).tolist()
