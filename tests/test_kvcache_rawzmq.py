"""The standalone server (`python -m playground.kvcache.server`) spoken to with raw pyzmq only,
following README.md#wire-protocol: JSON header frame + raw float32 KV frame."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 4


@pytest.fixture
def server(tmp_path):
    """(endpoint, process) of a standalone server on a fresh ipc path; always killed."""
    endpoint = f"ipc://{tmp_path}/kv.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "playground.kvcache.server",
            "--bind",
            endpoint,
            "--policy",
            "paged",
            "--capacity-tokens",
            "256",
            "--block-size",
            "16",
            "--width",
            str(WIDTH),
            "--lease-s",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()  # "serving ... on ENDPOINT", printed once bound
        assert "serving" in line, proc.stderr.read()
        yield endpoint, proc
    finally:
        proc.kill()
        proc.wait(5)


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
