"""The standalone server serving a model (`python -m playground.kvcache.server --random-model`),
spoken to with raw pyzmq only, following docs/protocols.md: generate over DEALER and REQ, attend,
the error replies, and a client that vanishes in the middle of a generate freed by its lease."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from playground.transformer import ModelConfig, Transformer, generate

ROOT = Path(__file__).resolve().parent.parent
MODEL = [
    "--random-model",
    "--layers",
    "2",
    "--d-model",
    "32",
    "--heads",
    "4",
    "--context",
    "64",
    "--seed",
    "3",
]


def start(tmp_path, *args):
    endpoint = f"ipc://{tmp_path}/kv.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "playground.kvcache.server",
        "--bind",
        endpoint,
        "--capacity-tokens",
        "512",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()  # "serving ... on ENDPOINT", printed once bound
    if "serving" not in line:
        proc.kill()
        raise AssertionError(proc.stderr.read())
    return endpoint, proc


@pytest.fixture
def model_server(tmp_path):
    endpoint, proc = start(tmp_path, *MODEL, "--lease-s", "1.0")
    try:
        yield endpoint, proc
    finally:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def connect(ctx, kind: int, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.linger = 0
    sock.connect(endpoint)
    return sock


def send(sock, header: dict, data: np.ndarray | None = None) -> None:
    sock.send_multipart(
        [json.dumps(header).encode()] + ([data.astype("<f4").tobytes()] if data is not None else [])
    )


def receive(sock, timeout_ms: int = 20_000) -> tuple[dict, bytes | None]:
    assert sock.poll(timeout_ms), "no reply"
    frames = sock.recv_multipart()
    return json.loads(frames[0]), (frames[1] if len(frames) > 1 else None)


def request(sock, header: dict, data=None) -> tuple[dict, bytes | None]:
    send(sock, header, data)
    return receive(sock)


@pytest.mark.timeout(60)
def test_raw_dealer_generates_what_dense_generation_does_and_pings_while_waiting(model_server, ctx):
    endpoint, proc = model_server
    sock = connect(ctx, zmq.DEALER, endpoint)
    info, _ = request(sock, {"op": "ping", "id": "p"})
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
    st, _ = request(sock, {"op": "stats"})
    assert st["allocated_slots"] == 0 and st["engine"]["finished_requests"] == 2 and proc.poll() is None


@pytest.mark.timeout(60)
def test_raw_req_socket_generate_and_error_replies(model_server, ctx):
    endpoint, proc = model_server
    sock = connect(ctx, zmq.REQ, endpoint)  # the delimiter frame is echoed, also on a deferred reply
    h, _ = request(sock, {"op": "generate", "prompt": "req", "max_new_tokens": 3})
    assert h["ok"] and len(h["tokens"][0]) == 3
    for bad, code in (
        ({"op": "generate", "prompt": "", "max_new_tokens": 3}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3, "n": 0}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3000}, "bad_request"),
        ({"op": "generate", "prompt": "a", "max_new_tokens": 3, "temperature": "hot"}, "bad_request"),
        ({"op": "attend", "seq_ids": [0], "layer": 0}, "unknown_sequence"),
    ):
        h, _ = request(sock, bad)
        assert h["ok"] is False and h["error"] == code, (bad, h)
    assert request(sock, {"op": "ping"})[0]["ok"] and proc.poll() is None  # still serving


@pytest.mark.timeout(60)
def test_a_client_vanishing_mid_generate_is_freed_by_its_lease(model_server, ctx):
    endpoint, _ = model_server
    gone = connect(ctx, zmq.DEALER, endpoint)
    send(gone, {"op": "generate", "id": 1, "prompt": "x" * 40, "max_new_tokens": 400})
    watcher = connect(ctx, zmq.DEALER, endpoint)
    deadline = time.monotonic() + 10
    while request(watcher, {"op": "stats"})[0]["allocated_slots"] == 0:  # it is running
        assert time.monotonic() < deadline
        watcher.poll(20)
    gone.close(0)  # vanishes without a word
    while True:  # the outcome we wait for is the lease (1 s) expiring; poll it, bounded
        st, _ = request(watcher, {"op": "stats"})
        if st["expired_seqs"] or time.monotonic() > deadline:
            break
        watcher.poll(50)
    assert st["expired_seqs"] == 1 and st["allocated_slots"] == 0 and st["engine"]["requests"] == 0


@pytest.mark.timeout(60)
def test_raw_attend_over_a_layout_server(tmp_path, ctx):
    endpoint, proc = start(tmp_path, "--width", "16", "--layers", "2", "--heads", "2")  # head_dim 2
    try:
        sock = connect(ctx, zmq.DEALER, endpoint)
        info, _ = request(sock, {"op": "ping"})
        assert (info["layers"], info["heads"], info["head_dim"], info["model"]) == (2, 2, 2, None)
        kv = np.arange(5 * 16, dtype=np.float32).reshape(5, 16) / 50
        seq = request(sock, {"op": "create", "num_tokens": 5}, kv)[0]["seq_id"]
        q = np.array([[[0.5, -1.0], [2.0, 0.25]]], np.float32)
        h, out = request(sock, {"op": "attend", "seq_ids": [seq], "layer": 1}, q)
        rows = kv.reshape(5, 2, 2, 2, 2)  # (tokens, layers, K/V, heads, head_dim)
        keys, values = rows[:, 1, 0].astype(np.float64), rows[:, 1, 1].astype(np.float64)
        scores = np.einsum("hd,thd->ht", q[0], keys) / np.sqrt(2)
        p = np.exp(scores - scores.max(1, keepdims=True))
        want = np.einsum("ht,thd->hd", p / p.sum(1, keepdims=True), values)
        got = np.frombuffer(out, dtype="<f4").reshape(1, 2, 2)[0]
        assert h["lengths"] == [5] and np.abs(got - want).max() < 1e-5 * np.abs(want).max()
        h, _ = request(sock, {"op": "attend", "seq_ids": [seq], "layer": 0}, q[:, :1])
        assert h["error"] == "bad_query_shape"
        h, _ = request(sock, {"op": "generate", "prompt": "a", "max_new_tokens": 2})
        assert h["error"] == "no_model" and proc.poll() is None
    finally:
        proc.kill()
        proc.wait(5)
