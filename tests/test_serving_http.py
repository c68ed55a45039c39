"""`python -m playground serve` as people run it: the real server on a free port, the real `openai`
client and raw HTTP. Completions equal dense generation token for token (greedy and seeded),
streaming gives the same text, chat goes through the template, /metrics parses, bad requests get
OpenAI's error bodies naming the field, a client that goes away mid-stream frees its blocks, and
Ctrl-C cancels what is in flight and exits 130 leaving no process and no port."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tools import importable, need

from playground.transformer import ModelConfig, Transformer, generate

pytestmark = pytest.mark.timeout(60)

SHAPE = ModelConfig(layers=2, d_model=32, heads=4, context=64)
MODEL = Transformer(SHAPE, seed=1)
RANDOM_FLAGS = ["--layers", "2", "--d-model", "32", "--heads", "4", "--context", "64"]
RANDOM_FLAGS += ["--model-seed", "1", "--port", "0", "--capacity-tokens", "4096", "--block-size", "4"]


def start_server(*flags: str, said: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """The server as a user starts it; its URL from the line it prints (the lines before in `said`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "playground", "serve", *RANDOM_FLAGS, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if " on http://" in line:
            return proc, line.split(" on ")[1].split()[0]
        if said is not None:
            said.append(line)
    proc.wait(10)
    raise AssertionError(f"the server did not start: {proc.stderr.read()}")


def stop_server(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def server():
    need(
        importable("uvicorn") and importable("openai") and importable("httpx"),
        "pip install -e '.[serve,test]'",
    )
    proc, url = start_server("--max-model-len", "4096")
    yield url
    assert stop_server(proc) == 130


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0, timeout=30)


def metrics(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics").text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def wait_idle(url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """/metrics once no block is held and nothing runs or waits (the engine frees them on the
    step after the abort, on its own thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(url)
        idle = m["playground_kv_blocks_used"] == m["playground_num_requests_running"] == 0
        if (idle and m["playground_num_requests_waiting"] == 0) or time.monotonic() > deadline:
            return m


def test_completions_equal_dense_generation_token_for_token_greedy_and_seeded(client):
    prompt = "paged attention "
    r = client.completions.create(
        model="playground", prompt=prompt, max_tokens=20, temperature=0, extra_body={"return_token_ids": True}
    )
    (choice,) = r.choices
    assert choice.model_extra["token_ids"] == generate(MODEL, prompt, 20).tolist()
    assert choice.finish_reason == "length" and r.usage.completion_tokens == 20
    assert r.usage.prompt_tokens == len(prompt.encode())
    seeded = client.completions.create(
        model="playground",
        prompt=[5, 6, 7],
        max_tokens=12,
        temperature=0.8,
        seed=9,
        n=3,
        extra_body={"return_token_ids": True},
    )
    for i, c in enumerate(sorted(seeded.choices, key=lambda c: c.index)):
        assert (
            c.model_extra["token_ids"] == generate(MODEL, [5, 6, 7], 12, temperature=0.8, seed=9 + i).tolist()
        )


def test_streaming_gives_the_same_text_and_chat_goes_through_the_template(client):
    prompt = "the lecture says"
    whole = client.completions.create(model="playground", prompt=prompt, max_tokens=30, temperature=0)
    streamed = client.completions.create(
        model="playground", prompt=prompt, max_tokens=30, temperature=0, stream=True
    )
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    expected = bytes(generate(MODEL, prompt, 30).tolist()).decode(errors="replace")
    assert whole.choices[0].text == expected
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paging?"}]
    template = "system: Be brief.\nuser: Paging?\nassistant:"
    chat = client.chat.completions.create(model="playground", messages=messages, max_tokens=10, temperature=0)
    assert chat.choices[0].message.content == bytes(generate(MODEL, template, 10).tolist()).decode(
        errors="replace"
    )
    deltas = client.chat.completions.create(
        model="playground", messages=messages, max_tokens=10, temperature=0, stream=True
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in deltas if c.choices)
        == chat.choices[0].message.content
    )


def test_a_stop_string_ends_the_sample_before_it(client):
    prompt = "abc"
    full = bytes(generate(MODEL, prompt, 40).tolist()).decode(errors="replace")
    stop = full[10:12]
    r = client.completions.create(
        model="playground", prompt=prompt, max_tokens=40, temperature=0, stop=[stop]
    )
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == full[: full.index(stop)]


def test_models_health_and_metrics(server, client):
    import httpx

    assert [m.id for m in client.models.list()] == ["playground"]
    assert httpx.get(server + "/health").json() == {"status": "ok"}
    client.completions.create(model="playground", prompt="x", max_tokens=3, temperature=0)
    m = wait_idle(server)
    assert m["playground_kv_blocks_total"] == 1024 and m["playground_generation_tokens_total"] >= 3
    assert m["playground_time_to_first_token_seconds_count"] >= 1
    assert m["playground_time_per_output_token_seconds_count"] >= 1
    assert {"playground_num_preemptions_total", "playground_prefix_cache_hits_total"} <= set(m)


@pytest.mark.parametrize(
    "route,body,status,param",
    [
        ("completions", b"{not json", 400, None),
        ("completions", b"[1, 2]", 400, None),
        ("completions", {"model": "gpt-4", "prompt": "a"}, 404, "model"),
        ("completions", {"prompt": "a"}, 400, "model"),
        ("completions", {"model": "playground", "prompt": {"a": 1}}, 400, "prompt"),
        ("completions", {"model": "playground", "prompt": [1, 999]}, 400, "prompt"),
        ("completions", {"model": "playground", "prompt": ""}, 400, "prompt"),
        ("completions", {"model": "playground", "prompt": "a", "max_tokens": 5000}, 400, "max_tokens"),
        ("completions", {"model": "playground", "prompt": "a", "max_tokens": "9"}, 400, "max_tokens"),
        ("completions", {"model": "playground", "prompt": "a", "n": 17}, 400, "n"),
        ("completions", {"model": "playground", "prompt": "a", "temperature": -1}, 400, "temperature"),
        ("completions", {"model": "playground", "prompt": "a", "stop": 3}, 400, "stop"),
        ("completions", {"model": "playground", "prompt": "a", "stream": "yes"}, 400, "stream"),
        ("chat/completions", {"model": "playground", "messages": "hi"}, 400, "messages"),
        (
            "chat/completions",
            {"model": "playground", "messages": [{"role": "x", "content": "a"}]},
            400,
            "messages[0]",
        ),
    ],
)
def test_bad_requests_get_openai_error_bodies_naming_the_field(server, route, body, status, param):
    import httpx

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server}/v1/{route}", content=data, headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_the_openai_client_raises_on_a_bad_request(client):
    import openai

    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096") as e:
        client.completions.create(model="playground", prompt="a", max_tokens=10**6)
    assert e.value.param == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="a")


def test_a_client_that_disconnects_mid_stream_frees_its_blocks_at_once(server):
    import httpx

    body = {"model": "playground", "prompt": "long", "max_tokens": 4000, "temperature": 0, "stream": True}
    before = metrics(server)["playground_generation_tokens_total"]
    with httpx.stream("POST", server + "/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        assert metrics(server)["playground_kv_blocks_used"] > 0
    m = wait_idle(server)
    assert m["playground_kv_blocks_used"] == m["playground_num_requests_running"] == 0
    assert m["playground_generation_tokens_total"] - before < 4000  # aborted, not run to the end


def port_is_closed(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


def test_ctrl_c_cancels_what_is_in_flight_and_exits_130_leaving_nothing():
    need(importable("uvicorn") and importable("httpx"), "pip install -e '.[serve,test]'")
    import httpx

    proc, url = start_server("--model", "random", "--max-model-len", "100000")
    body = {"model": "playground", "prompt": "x", "max_tokens": 99000, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        proc.send_signal(signal.SIGINT)
        rest = list(lines)  # the stream ends instead of running 99,000 tokens
    assert any('"cancelled"' in line for line in rest) or not rest
    assert stop_server(proc) == 130
    assert "interrupted" in proc.stderr.read()
    assert port_is_closed(url)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == proc.pid]


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys):
    from playground.cli import main

    for flags, key in [
        (["--port", "70000"], "--port"),
        (["--model", str(tmp_path / "nope.npz")], "model"),
        (["--chunked-prefill", "--prefix-caching"], "--prefix-caching"),
        (["--speculative-tokens", "-1"], "--speculative-tokens"),
        (["--capacity-tokens", "16"], "--capacity-tokens"),
        (["--heads", "5"], "--heads"),
        (["--journal", str(tmp_path / "no" / "such" / "dir.jsonl")], "--journal"),
    ]:
        assert main(["serve", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert key in err and len(err.strip().splitlines()) == 1, (flags, err)


def test_latest_is_the_newest_trained_model_under_runs(tmp_path):
    need(importable("uvicorn"), "pip install -e '.[serve]'")
    from playground.serving.http.server import ServeConfig, load_served_model
    from playground.transformer.checkpoint import save_model

    for name, seed in (("20260101-000000-train", 1), ("20260102-000000-train", 2)):
        (tmp_path / name).mkdir()
        save_model(tmp_path / name / "model.npz", SHAPE, Transformer(SHAPE, seed=seed).params)
    model, what = load_served_model(ServeConfig(runs_dir=str(tmp_path)))
    assert "20260102-000000-train/model.npz" in what and "context 64" in what
    assert (model.params == Transformer(SHAPE, seed=2).params).all()
