"""The standalone server (`python -m playground.kvcache.server`) spoken to with raw pyzmq only,
following docs/protocols.md: JSON header frame + raw float32 data frame. Opaque KV; KV with an
attention layout (`attend`); a served model (`generate` over DEALER and REQ, and a client that
vanishes in the middle of one, freed by its lease)."""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from playground.kvcache.server.client import KVClient
from playground.transformer import ModelConfig, Transformer, generate

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 4


def start(tmp_path, *args: str) -> tuple[str, subprocess.Popen]:
    """(endpoint, process) of a standalone server on a fresh ipc path, once it is bound."""
    endpoint = f"ipc://{tmp_path}/kv.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "playground.kvcache.server", "--bind", endpoint, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()  # "serving ... on ENDPOINT", printed once bound
    if "serving" not in line:
        proc.kill()
        raise AssertionError(proc.stderr.read())
    return endpoint, proc


@contextlib.contextmanager
def running(tmp_path, *args: str):
    endpoint, proc = start(tmp_path, *args)
    try:
        yield endpoint, proc
    finally:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def server(tmp_path):
    """A paged server of opaque KV (width 4) with a 0.5 s lease; always killed."""
    args = ["--policy", "paged", "--capacity-tokens", "256", "--block-size", "16", "--width", str(WIDTH)]
    with running(tmp_path, *args, "--lease-s", "0.5") as s:
        yield s


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def request(sock, header: dict, kv: np.ndarray | None = None, timeout_ms: int = 5000):
    frames = [json.dumps(header).encode()]
    if kv is not None:
        frames.append(kv.astype("<f4").tobytes())
    sock.send_multipart(frames)
    assert sock.poll(timeout_ms), f"no reply to {header}"
    reply = sock.recv_multipart()
    out = np.frombuffer(reply[1], dtype="<f4").reshape(-1, WIDTH) if len(reply) > 1 else None
    return json.loads(reply[0]), out


def connect(ctx, kind: int, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.linger = 0
    sock.connect(endpoint)
    return sock


@pytest.mark.timeout(30)
def test_raw_dealer_create_fork_append_read_free(server, ctx):
    endpoint, _ = server
    sock = connect(ctx, zmq.DEALER, endpoint)
    info, _ = request(sock, {"op": "ping", "id": "hello"})
    assert info["ok"] and info["id"] == "hello" and info["width"] == WIDTH and info["block_size"] == 16
    prompt = np.arange(20 * WIDTH, dtype=np.float32).reshape(20, WIDTH)
    h, _ = request(sock, {"op": "create", "id": 1, "num_tokens": 20}, prompt)
    parent = h["seq_id"]
    h, _ = request(sock, {"op": "fork", "id": 2, "seq_id": parent, "num_children": 2})
    c1, c2 = h["child_ids"]
    tail1, tail2 = np.full((3, WIDTH), 1.5, np.float32), np.full((1, WIDTH), -2.0, np.float32)
    h, _ = request(
        sock,
        {"op": "append", "id": 3, "seq_ids": [c1, c2], "num_tokens": [3, 1]},
        np.concatenate([tail1, tail2]),
    )
    assert h["ok"] and h["lengths"] == [23, 21]
    h, kv = request(sock, {"op": "read", "id": 4, "seq_id": c1})
    assert h["num_tokens"] == 23 and np.array_equal(kv, np.concatenate([prompt, tail1]))
    assert np.array_equal(request(sock, {"op": "read", "seq_id": c2})[1], np.concatenate([prompt, tail2]))
    assert np.array_equal(request(sock, {"op": "read", "seq_id": parent})[1], prompt)
    st, _ = request(sock, {"op": "stats"})
    assert st["cow_copies"] == 2 and st["shared_blocks"] == 1 and st["used_blocks"] == 4
    assert request(sock, {"op": "free", "seq_ids": [parent, c1, c2]})[0]["freed"] == 3
    assert request(sock, {"op": "stats"})[0]["free_blocks"] == 16


@pytest.mark.timeout(30)
def test_raw_req_socket_and_error_replies(server, ctx):
    endpoint, proc = server
    sock = connect(ctx, zmq.REQ, endpoint)  # REQ adds an empty delimiter frame; the server echoes it
    h, _ = request(sock, {"op": "read", "seq_id": 12345})
    assert h["ok"] is False and h["error"] == "unknown_sequence"
    sock.send(b"{broken")
    assert sock.poll(5000)
    assert json.loads(sock.recv())["error"] == "bad_frame"
    h, _ = request(sock, {"op": "create", "num_tokens": 2}, np.zeros((2, WIDTH + 1), np.float32))
    assert h["error"] == "bad_kv_shape"
    h, _ = request(sock, {"op": "create", "num_tokens": 300}, np.zeros((300, WIDTH), np.float32))
    assert h["error"] == "out_of_memory" and h["fits_when_empty"] is False
    h, _ = request(sock, {"op": "teleport"})
    assert h["error"] == "unknown_op"
    assert request(sock, {"op": "ping"})[0]["ok"] and proc.poll() is None  # still serving


@pytest.mark.timeout(30)
def test_vanished_client_blocks_return_after_the_lease(server, ctx):
    endpoint, _ = server
    gone = connect(ctx, zmq.DEALER, endpoint)
    h, _ = request(gone, {"op": "create", "num_tokens": 40}, np.ones((40, WIDTH), np.float32))
    assert h["ok"]
    gone.close(0)  # vanishes without freeing
    watcher = connect(ctx, zmq.DEALER, endpoint)
    deadline = time.monotonic() + 10
    while True:  # the outcome we wait for is the lease expiring (0.5 s); poll it, bounded
        st, _ = request(watcher, {"op": "stats"})
        if st["live_seqs"] == 0 or time.monotonic() > deadline:
            break
        watcher.poll(50)  # pace the polling without a bare sleep
    assert st["live_seqs"] == 0 and st["expired_seqs"] == 1 and st["free_blocks"] == 16


# -- a served model, and KV that attend reads -----------------------------------------------------

MODEL = "--random-model --layers 2 --d-model 32 --heads 4 --context 64 --seed 3".split()
LAYOUT = "--capacity-tokens 512 --width 16 --layers 2 --heads 2".split()  # head_dim 2


@pytest.fixture
def model_server(tmp_path):
    with running(tmp_path, "--capacity-tokens", "512", *MODEL, "--lease-s", "1.0") as s:
        yield s


def send(sock, header: dict, data: np.ndarray | None = None) -> None:
    sock.send_multipart(
        [json.dumps(header).encode()] + ([data.astype("<f4").tobytes()] if data is not None else [])
    )


def receive(sock, timeout_ms: int = 20_000) -> tuple[dict, bytes | None]:
    assert sock.poll(timeout_ms), "no reply"
    frames = sock.recv_multipart()
    return json.loads(frames[0]), (frames[1] if len(frames) > 1 else None)


def ask(sock, header: dict, data=None) -> tuple[dict, bytes | None]:
    """One request and its reply's (header, raw data frame)."""
    send(sock, header, data)
    return receive(sock)


@pytest.mark.timeout(60)
def test_raw_dealer_generates_what_dense_generation_does_and_pings_while_waiting(model_server, ctx):
    endpoint, proc = model_server
    sock = connect(ctx, zmq.DEALER, endpoint)
    info, _ = ask(sock, {"op": "ping", "id": "p"})
    assert info["model"]["context"] == 64 and info["width"] == 2 * 2 * 32 and info["layers"] == 2
    send(sock, {"op": "generate", "id": "g1", "prompt": "hello, paged world", "max_new_tokens": 60, "n": 2})
    send(
        sock,
        {
            "op": "generate",
            "id": "g2",
            "prompt": [72, 105],
            "max_new_tokens": 5,
            "temperature": 0.7,
            "seed": 4,
        },
    )
    send(sock, {"op": "ping", "id": "p2"})  # answered at once, before the generates finish
    replies = {}
    while len(replies) < 3:
        header, _ = receive(sock)
        replies[header["id"]] = header
    model = Transformer(ModelConfig(layers=2, d_model=32, heads=4, context=64), seed=3)
    assert replies["g1"]["tokens"] == [generate(model, "hello, paged world", 60).tolist()] * 2
    assert replies["g2"]["tokens"] == [generate(model, [72, 105], 5, temperature=0.7, seed=4).tolist()]
    assert replies["g1"]["ttft_s"] <= replies["g1"]["e2e_s"] and len(replies["g1"]["token_times_s"][1]) == 60
    st, _ = ask(sock, {"op": "stats"})
    assert st["allocated_slots"] == 0 and st["engine"]["finished_requests"] == 2 and proc.poll() is None


@pytest.mark.timeout(60)
def test_raw_req_socket_generate_and_error_replies(model_server, ctx):
    endpoint, proc = model_server
    sock = connect(ctx, zmq.REQ, endpoint)  # the delimiter frame is echoed, also on a deferred reply
    h, _ = ask(sock, {"op": "generate", "prompt": "req", "max_new_tokens": 3})
    assert h["ok"] and len(h["tokens"][0]) == 3
    for bad, code in (
        ({"op": "generate", "prompt": "", "max_new_tokens": 3}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3, "n": 0}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3000}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3, "temperature": "hot"}, "bad_request"),
        ({"op": "attend", "seq_ids": [0], "layer": 0}, "unknown_sequence"),
    ):
        h, _ = ask(sock, bad)
        assert h["ok"] is False and h["error"] == code, (bad, h)
    assert ask(sock, {"op": "ping"})[0]["ok"] and proc.poll() is None  # still serving


@pytest.mark.timeout(60)
def test_a_client_vanishing_mid_generate_is_freed_by_its_lease(model_server, ctx):
    endpoint, _ = model_server
    gone = connect(ctx, zmq.DEALER, endpoint)
    # 16 samples of 2000 tokens past a 64-token context: minutes of work, certain to outlive the lease
    send(gone, {"op": "generate", "id": 1, "prompt": "x" * 40, "max_new_tokens": 2000, "n": 16})
    watcher = connect(ctx, zmq.DEALER, endpoint)
    deadline = time.monotonic() + 10
    while ask(watcher, {"op": "stats"})[0]["allocated_slots"] == 0:  # it is running
        assert time.monotonic() < deadline
        watcher.poll(20)
    gone.close(0)  # vanishes without a word
    while True:  # the outcome we wait for is the lease (1 s) expiring; poll it, bounded
        st, _ = ask(watcher, {"op": "stats"})
        if st["expired_seqs"] or time.monotonic() > deadline:
            break
        watcher.poll(50)
    assert st["expired_seqs"] >= 1 and st["allocated_slots"] == 0 and st["engine"]["requests"] == 0


@pytest.mark.timeout(60)
def test_raw_attend_over_a_layout_server(tmp_path, ctx):
    with running(tmp_path, *LAYOUT) as (endpoint, proc):
        sock = connect(ctx, zmq.DEALER, endpoint)
        info, _ = ask(sock, {"op": "ping"})
        assert (info["layers"], info["heads"], info["head_dim"], info["model"]) == (2, 2, 2, None)
        kv = np.arange(5 * 16, dtype=np.float32).reshape(5, 16) / 50
        seq = ask(sock, {"op": "create", "num_tokens": 5}, kv)[0]["seq_id"]
        q = np.array([[[0.5, -1.0], [2.0, 0.25]]], np.float32)
        h, out = ask(sock, {"op": "attend", "seq_ids": [seq], "layer": 1}, q)
        rows = kv.reshape(5, 2, 2, 2, 2)  # (tokens, layers, K/V, heads, head_dim)
        keys, values = rows[:, 1, 0].astype(np.float64), rows[:, 1, 1].astype(np.float64)
        scores = np.einsum("hd,thd->ht", q[0], keys) / np.sqrt(2)
        p = np.exp(scores - scores.max(1, keepdims=True))
        want = np.einsum("ht,thd->hd", p / p.sum(1, keepdims=True), values)
        got = np.frombuffer(out, dtype="<f4").reshape(1, 2, 2)[0]
        assert h["lengths"] == [5] and np.abs(got - want).max() < 1e-5 * np.abs(want).max()
        h, _ = ask(sock, {"op": "attend", "seq_ids": [seq], "layer": 0}, q[:, :1])
        assert h["error"] == "bad_query_shape"
        h, _ = ask(sock, {"op": "generate", "prompt": "a", "max_new_tokens": 2})
        assert h["error"] == "no_model" and proc.poll() is None


@pytest.mark.timeout(30)
def test_a_client_waiting_for_generates_pings_even_while_replies_keep_coming(tmp_path, ctx):
    """Replies do not renew a lease, so collect() must send a ping every lease / 3 even when it
    never sits idle that long: a server thread answers one of 8 generates every 50 ms."""
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.bind(f"ipc://{tmp_path}/r.sock")
    client = KVClient(f"ipc://{tmp_path}/r.sock", timeout_s=5, ctx=ctx)
    client.lease_s = 0.3  # ping every 0.1 s
    ids = [client.submit("x", 3) for _ in range(8)]
    pings = []

    def serve():
        identity, generates = None, []
        while len(generates) < 8:
            identity, frame = router.recv_multipart()
            generates.append(json.loads(frame)["id"])
        for rid in generates:
            deadline = time.monotonic() + 0.05
            while router.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                _, frame = router.recv_multipart()
                pings.append(json.loads(frame)["op"])
            router.send_multipart([identity, json.dumps({"ok": True, "id": rid, "tokens": [[1]]}).encode()])

    server = threading.Thread(target=serve)
    server.start()
    replies = client.collect(ids)
    server.join(5)
    assert sorted(replies) == ids and pings and set(pings) == {"ping"}
    assert len(pings) >= 2  # 8 x 50 ms of replies: at least two pings in 400 ms at one per 100 ms
