"""Thousands of random requests against the serving app (hypothesis): bodies of random JSON, the
routes' own fields with values of every type, bytes that are not JSON. The server answers each
with 200 or an OpenAI error body (4xx, naming a field where there is one), never 500, and once
they are answered no KV block is held and nothing runs or waits."""

import asyncio
import json
import time

import pytest
from tools import importable, need

from playground.transformer import ModelConfig

pytestmark = pytest.mark.timeout(120)

FIELDS = [
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "seed",
    "n",
    "stop",
    "stream",
    "stream_options",
    "return_token_ids",
]


class AsgiClient:
    """POSTs straight into the ASGI app on one event loop (no sockets, no thread per request):
    thousands of requests in seconds. The client never disconnects."""

    def __init__(self, app):
        self.app, self.loop = app, asyncio.new_event_loop()

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "server": ("test", 80),
            "client": ("test", 1),
        }
        sent = asyncio.Event()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        out: list[dict] = []

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # still connected
            raise AssertionError

        async def send(message: dict) -> None:
            out.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent.set()

        await self.app(scope, receive, send)
        assert sent.is_set()
        return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return self.loop.run_until_complete(asyncio.wait_for(self._post(path, body), 30))


@pytest.fixture(scope="module")
def app():
    need(importable("starlette") and importable("hypothesis"), "pip install -e '.[serve,test]'")
    from playground.serving.http.app import build_app
    from playground.serving.http.server import ServeConfig, build_served, load_served_model

    config = ServeConfig(
        model="random",
        random_shape=ModelConfig(layers=1, d_model=16, heads=2, context=32),
        capacity_tokens=512,
        block_size=4,
        max_n=4,
    )
    served = build_served(config, load_served_model(config)[0])
    served.loop.start()
    client = AsgiClient(build_app(served))
    yield client, served
    served.loop.stop()
    client.loop.close()


def test_random_requests_never_get_a_500_and_leak_no_block(app):
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    client, served = app
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
    values = st.recursive(
        scalars,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=2),
        max_leaves=4,
    )
    valid = {
        "prompt": st.text(min_size=1, max_size=20) | st.lists(st.integers(0, 255), min_size=1, max_size=20),
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "system"]), "content": st.text(max_size=8)}
            ),
            min_size=1,
            max_size=2,
        ),
        "max_tokens": st.integers(1, 3),
        "temperature": st.floats(0, 2),
        "seed": st.integers(0, 1000),
        "n": st.integers(1, 4),
        "stop": st.lists(st.text(min_size=1, max_size=2), max_size=2),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "return_token_ids": st.booleans(),
    }
    base = st.fixed_dictionaries(
        {"model": st.just("playground"), "prompt": valid["prompt"], "messages": valid["messages"]},
        optional={k: v for k, v in valid.items() if k not in ("prompt", "messages")},
    )
    # valid requests, ones with one field given a value of any type, and anything at all
    corrupt = st.tuples(base, st.sampled_from(FIELDS), values).map(lambda t: {**t[0], t[1]: t[2]})
    bodies = st.one_of(base, corrupt, st.dictionaries(st.sampled_from(FIELDS), values, max_size=4), values)
    raw = st.one_of(bodies.map(lambda b: json.dumps(b).encode()), st.binary(max_size=30))
    statuses: dict[int, int] = {}

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.lists(
            st.tuples(st.sampled_from(["/v1/completions", "/v1/chat/completions"]), raw),
            min_size=20,
            max_size=20,
        )
    )
    def fire(requests):  # 100 x 20: 2,000 requests (drawn in batches: hypothesis' cost is per example)
        for route, body in requests:
            status, text = client.post(route, body)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (200, 400, 404), (status, body, text[:300])
            if status != 200:
                error = json.loads(text)["error"]
                assert error["message"] and error["type"]
            elif not text.startswith(b"data: "):
                assert json.loads(text)["choices"]

    fire()
    assert sum(statuses.values()) == 2000 and statuses.get(200, 0) > 200 and statuses.get(400, 0) > 500, (
        statuses
    )
    engine = served.loop.engine
    deadline = time.monotonic() + 10
    while (engine.requests or engine.policy.allocated_slots()) and time.monotonic() < deadline:
        time.sleep(0.01)  # the engine's thread finishes the last aborts
    assert not engine.requests and engine.policy.allocated_slots() == 0
    engine.policy.check_invariants()
