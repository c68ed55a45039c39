"""The ASGI app (Starlette): OpenAI's routes in front of the engine loop, /health and /metrics.

    GET  /health               200 while the engine runs, 503 once it failed
    GET  /metrics              Prometheus' text format (metrics.py)
    GET  /v1/models            the one model served
    POST /v1/completions       a prompt (text or token ids) -> n samples, or server-sent events
    POST /v1/chat/completions  messages through the plain template (openai_protocol.py)

A handler checks the request (a `RequestError` becomes OpenAI's error body, 4xx), hands it to the
engine loop by id and reads the `Output`s that come back each step. Every way a handler can end
(the request finished, every sample met a stop string, the client went away, the server stops)
aborts the request in the engine if it is still there, so its blocks are freed at once: a
handler races its work against the client's `http.disconnect` and cancels the loser. A request with
an `Idempotency-Key` header is answered once however often it is sent (idempotency.py).
"""

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from playground.core.errors import RequestError
from playground.kvcache.engine.sequence import SamplingParams
from playground.serving.http.engine_loop import EngineLoop, Output
from playground.serving.http.idempotency import HEADER, REPLAYED, Idempotency
from playground.serving.http.metrics import CONTENT_TYPE, ServingMetrics
from playground.serving.http.openai_protocol import (
    CompletionRequest,
    Limits,
    error_body,
    parse_body,
    parse_request,
)
from playground.serving.http.text_stream import SampleText


@dataclass
class Served:
    """What the routes share: the engine loop, its limits and metrics, the created time, the
    idempotency keys' answers."""

    loop: EngineLoop
    limits: Limits
    metrics: ServingMetrics
    created_s: int
    idempotency: Idempotency = field(default_factory=Idempotency)


class Generation:
    """One request in flight: its queue of Outputs, each sample's text, and its end."""

    def __init__(self, served: Served, req: CompletionRequest, request_id: int):
        self.served, self.req, self.request_id = served, req, request_id
        self.outputs: asyncio.Queue[Output] = asyncio.Queue()
        self.texts = [SampleText(req.stop) for _ in range(req.n)]
        self.finish = [""] * req.n  # "length" or "stop" once a sample is done
        self.done = False
        loop = asyncio.get_running_loop()

        def deliver(out: Output) -> None:  # the engine's thread
            try:
                loop.call_soon_threadsafe(self.outputs.put_nowait, out)
            except RuntimeError:  # the event loop is closed: nobody waits any more
                pass

        seed = req.seed if req.seed is not None else secrets.randbits(63)
        params = SamplingParams(req.max_tokens, n=req.n, temperature=req.temperature, seed=seed)
        served.loop.submit(request_id, list(req.prompt), params, deliver)

    async def next_step(self) -> list[str]:
        """The next Output applied: each sample's new text (the samples that just ended get their
        finish reason)."""
        out = await self.outputs.get()
        if out.error:
            raise RequestError(out.error, status=503, code="cancelled")
        deltas = []
        for i, (text, tokens) in enumerate(zip(self.texts, out.token_ids, strict=True)):
            text.add(tokens, final=out.finished)
            if not self.finish[i] and (text.stopped or out.finished):
                self.finish[i] = "stop" if text.stopped else "length"
            deltas.append(text.delta(final=bool(self.finish[i])))
        self.done = all(self.finish)
        return deltas

    def close(self) -> None:
        """Abort it in the engine unless it finished there (stopped samples, a gone client)."""
        if not self.done or any(f == "stop" for f in self.finish):
            self.served.loop.abort(self.request_id)

    def usage(self) -> dict:
        completion = sum(len(t.token_ids) for t in self.texts)
        prompt = len(self.req.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def choice(self, i: int, text: str, finish: str | None) -> dict:
        if self.req.chat:
            body: dict = {"index": i, "message": {"role": "assistant", "content": text}}
        else:
            body = {"index": i, "text": text, "logprobs": None}
        body["finish_reason"] = finish
        if self.req.return_token_ids:
            body["token_ids"] = self.texts[i].token_ids
        return body


async def until_disconnect(work: Awaitable, receive: Receive) -> tuple[bool, object]:
    """Run `work` unless the client disconnects first: (disconnected, work's result)."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait([task, watch], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            t.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)
    if task.done() and not task.cancelled():
        return False, task.result()
    return True, None


class EventStream(Response):
    """Server-sent events from `events`, ending when they do or when the client goes away;
    `on_close` runs either way (Starlette's StreamingResponse would notice a gone client only at
    its next write)."""

    media_type = "text/event-stream"

    def __init__(
        self, events: AsyncIterator[bytes], on_close: Callable[[], None], headers: dict | None = None
    ):
        self.status_code, self.background = 200, None
        self.init_headers({"cache-control": "no-cache", **(headers or {})})  # no body: no content-length
        self.events, self.on_close = events, on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def stream() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await until_disconnect(stream(), receive)
        except OSError:  # the client is gone
            pass
        finally:
            self.on_close()


def _event(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def _sse(gen: Generation, head: dict, on_done: Callable[[], None]) -> AsyncIterator[bytes]:
    """OpenAI's chunks: a delta per sample and step, its finish reason in its last, [DONE];
    `on_done` runs once every sample has ended, before their last chunks are sent."""
    if gen.req.chat:
        yield _event(
            {
                **head,
                "choices": [
                    _chunk(gen, i, {"role": "assistant", "content": ""}, None) for i in range(gen.req.n)
                ],
            }
        )
    ended = [False] * gen.req.n
    while not gen.done:
        try:
            deltas = await gen.next_step()
        except RequestError as e:
            yield _event(error_body(e))
            break
        if gen.done:
            on_done()
        choices = []
        for i, delta in enumerate(deltas):
            if ended[i] or not (delta or gen.finish[i]):
                continue
            ended[i] = bool(gen.finish[i])
            body = {"content": delta} if gen.req.chat else delta
            choices.append(_chunk(gen, i, body, gen.finish[i] or None))
        if choices:
            yield _event({**head, "choices": choices})
    if gen.req.include_usage and gen.done:
        yield _event({**head, "choices": [], "usage": gen.usage()})
    yield _event("[DONE]")


def _chunk(gen: Generation, i: int, delta: dict | str, finish: str | None) -> dict:
    if gen.req.chat:
        return {"index": i, "delta": delta, "finish_reason": finish}
    return {"index": i, "text": delta, "logprobs": None, "finish_reason": finish}


async def _generate(served: Served, ids: Iterator[int], request: Request, chat: bool) -> Response:
    """A completion or chat request: streamed as server-sent events, or collected into one reply
    (499 when the client left before it was done); with an idempotency key, its kept reply if it
    has one."""
    body = parse_body(await request.body())
    req = parse_request(body, served.limits, chat)
    key = Idempotency.key(request.headers.get(HEADER))
    if served.loop.failure:
        raise RequestError(served.loop.failure, status=503, code="engine_failed")
    kind = "chat.completion" if chat else "text_completion"
    if key is not None:
        kept = await served.idempotency.claim(key, body)
        if kept is not None:
            return _replay(kept, req)
    try:
        gen = Generation(served, req, next(ids))
    except BaseException:
        if key is not None:
            served.idempotency.drop(key)
        raise
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}",
        "created": int(time.time()),
        "model": served.limits.model,
    }

    def reply() -> dict:
        choices = [gen.choice(i, t.text, gen.finish[i]) for i, t in enumerate(gen.texts)]
        return {**head, "object": kind, "choices": choices, "usage": gen.usage()}

    def keep() -> None:  # the one reply, kept (and journaled) before it is sent
        if key is not None:
            served.idempotency.done(key, reply())

    def close() -> None:
        gen.close()
        if key is not None:
            served.idempotency.drop(key)  # nothing once kept; else a re-send runs it again

    if req.stream:
        return EventStream(_sse(gen, {**head, "object": kind + (".chunk" if chat else "")}, keep), close)

    async def collect() -> None:
        while not gen.done:
            await gen.next_step()

    try:
        gone, _ = await until_disconnect(collect(), request.receive)
        if not gone:
            keep()
    finally:
        close()
    if gone:
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")
    return JSONResponse(reply())


def _replay(kept: dict, req: CompletionRequest) -> Response:
    """A kept reply sent again: as it was, or as a stream of one chunk a choice (its whole text and
    finish reason), the usage if asked, [DONE]."""
    headers = {REPLAYED: "true"}
    if not req.stream:
        return JSONResponse(kept, headers=headers)
    head = {"id": kept["id"], "created": kept["created"], "model": kept["model"]}
    head["object"] = "chat.completion.chunk" if req.chat else "text_completion"
    events = []
    for c in kept["choices"]:
        if req.chat:
            delta = {"role": "assistant", "content": c["message"]["content"]}
            choice = {"index": c["index"], "delta": delta, "finish_reason": c["finish_reason"]}
        else:
            choice = {
                "index": c["index"],
                "text": c["text"],
                "logprobs": None,
                "finish_reason": c["finish_reason"],
            }
        events.append(_event({**head, "choices": [choice]}))
    if req.include_usage:
        events.append(_event({**head, "choices": [], "usage": kept["usage"]}))
    events.append(_event("[DONE]"))

    async def replayed() -> AsyncIterator[bytes]:
        for e in events:
            yield e

    return EventStream(replayed(), lambda: None, headers)


async def _request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return JSONResponse(error_body(exc), status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    e = RequestError(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code)
    return JSONResponse(error_body(e), status_code=exc.status_code)


def build_app(served: Served) -> Starlette:
    """The ASGI app over `served` (the engine loop, its limits and metrics): OpenAI's completion and
    chat routes, the model list, /health and Prometheus' /metrics; request ids numbered from 0."""
    ids = itertools.count()

    async def completions(request: Request) -> Response:
        return await _generate(served, ids, request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _generate(served, ids, request, chat=True)

    async def models(request: Request) -> Response:
        card = {
            "id": served.limits.model,
            "object": "model",
            "created": served.created_s,
            "owned_by": "playground",
            "max_model_len": served.limits.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        if served.loop.failure:
            return JSONResponse({"status": "failed", "error": served.loop.failure}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        return Response(served.metrics.exposition(), media_type=CONTENT_TYPE)

    routes = [
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/v1/models", models),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
    handlers = {RequestError: _request_error, HTTPException: _http_error}
    return Starlette(routes=routes, exception_handlers=handlers)
