"""`serve`'s idempotency keys, with the real server and the real `openai` client: a request sent
again under its `Idempotency-Key` gets its one reply (marked replayed, streamed or not), a key used
for another body is refused naming the header; with `--journal`, a server SIGKILLed and started
again answers what the old one finished from the journal, and a request it held in flight, re-sent
by the client's own retries under the same key, is generated once by the new server and equals
dense generation."""

import signal
import socket
import threading

import pytest
from test_serving_http import MODEL, metrics, start_server, stop_server
from tools import importable, need

from playground.transformer import generate

pytestmark = pytest.mark.timeout(90)


def client_for(url: str, **kw):
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=30, **{"max_retries": 0, **kw})


def keyed(key: str) -> dict:
    return {"extra_headers": {"Idempotency-Key": key}}


@pytest.fixture(scope="module")
def url():
    need(importable("uvicorn") and importable("openai") and importable("httpx"), "pip install -e '.[test]'")
    proc, url = start_server("--max-model-len", "4096")
    yield url
    assert stop_server(proc) == 130


def generated(url: str) -> float:
    """Requests the engine finished (its own count: a replay adds none)."""
    return metrics(url)["playground_e2e_request_latency_seconds_count"]


def test_a_resent_key_gets_its_one_reply_streamed_or_not(url):
    client = client_for(url)
    ask = {"model": "playground", "prompt": "idempotent ", "max_tokens": 12, "temperature": 0.9, "seed": 4}
    before = generated(url)
    first = client.completions.with_raw_response.create(**ask, **keyed("k-1"))
    again = client.completions.with_raw_response.create(**ask, **keyed("k-1"))
    assert again.headers.get("idempotent-replayed") == "true" and "idempotent-replayed" not in first.headers
    assert again.parse().model_dump() == first.parse().model_dump()  # the same id, text and usage
    assert generated(url) == before + 1
    streamed = [client.completions.create(**ask, stream=True, **keyed("k-2")) for _ in range(2)]
    texts = ["".join(c.choices[0].text for c in s if c.choices) for s in streamed]
    assert texts[0] == texts[1] == first.parse().choices[0].text  # seeded: the same tokens as k-1
    assert generated(url) == before + 2


def test_a_key_used_for_another_body_is_refused_naming_the_header(url):
    import openai

    client = client_for(url)
    client.completions.create(model="playground", prompt="a", max_tokens=2, **keyed("k-3"))
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.completions.create(model="playground", prompt="b", max_tokens=2, **keyed("k-3"))
    assert e.value.body["param"] == "Idempotency-Key" and "another request" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="playground", prompt="a", max_tokens=2, **keyed("x" * 256))
    assert e.value.body["param"] == "Idempotency-Key"


def test_a_restarted_server_answers_each_key_once(tmp_path):
    need(importable("uvicorn") and importable("openai") and importable("httpx"), "pip install -e '.[test]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    journal = str(tmp_path / "answers.jsonl")
    flags = ["--journal", journal, "--max-model-len", "100000"]
    old, url = start_server(*flags, "--port", port)
    finished = client_for(url).completions.create(
        model="playground", prompt="kept", max_tokens=8, temperature=0, **keyed("done")
    )
    long = {"model": "playground", "prompt": "in flight ", "max_tokens": 3000, "temperature": 0}
    got: dict = {}
    retrying = client_for(url, max_retries=8)  # the client's own retries re-send under the same key
    sender = threading.Thread(
        target=lambda: got.update(r=retrying.completions.create(**long, **keyed("held")))
    )
    sender.start()
    while metrics(url)["playground_num_requests_running"] < 1:  # polled: it runs within a step
        assert sender.is_alive(), "the long request ended before the server could be killed"
    old.send_signal(signal.SIGKILL)
    old.wait(10)
    said: list[str] = []
    new, url = start_server(*flags, "--port", port, said=said)
    try:
        assert any(f"journal: {journal} (1 answer(s) kept from before)" in line for line in said)
        sender.join(60)
        assert not sender.is_alive()
        expected = bytes(generate(MODEL, "in flight ", 3000).tolist()).decode(errors="replace")
        assert got["r"].choices[0].text == expected  # run again from its prompt: the same tokens
        client = client_for(url)
        replay = client.completions.with_raw_response.create(
            model="playground", prompt="kept", max_tokens=8, temperature=0, **keyed("done")
        )
        assert replay.headers.get("idempotent-replayed") == "true"
        assert replay.parse().model_dump() == finished.model_dump()  # from the journal, not generated
        held = client.completions.with_raw_response.create(**long, **keyed("held"))
        assert held.headers.get("idempotent-replayed") == "true" and held.parse().id == got["r"].id
        assert (
            metrics(url)["playground_e2e_request_latency_seconds_count"] == 1
        )  # the held request, generated once
    finally:
        assert stop_server(new) == 130
