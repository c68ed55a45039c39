"""OpenAI's completion and chat requests, read and checked; the replies' JSON. Pure: no sockets.

The model is byte-level: a prompt's tokens are its UTF-8 bytes (or a list of token ids, as
OpenAI's API allows), and the text of what it generates is those bytes decoded, each invalid byte
as U+FFFD. A chat is one prompt through a plain template, a line per message and the assistant's
turn open:

    system: You answer briefly.
    user: What is paging?
    assistant:

Every check names its field in a `RequestError` (an HTTP 400 with OpenAI's error body; an unknown
model is a 404). Fields OpenAI defines that this server does not use are ignored, as vLLM ignores
them; the ones it uses must have OpenAI's types and ranges, and `prompt + max_tokens` must fit
`max_model_len`. `return_token_ids` (vLLM's name) adds each choice's token ids to the reply.
"""

import json
import math
from dataclasses import dataclass
from typing import Any

from playground.core.errors import RequestError

MAX_STOP_STRINGS = 4  # as OpenAI
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for completions
GREEDY_BELOW = 1e-5  # a temperature below this samples greedily
ROLES = ("system", "user", "assistant", "developer", "tool")


@dataclass(frozen=True)
class Limits:
    """What the server accepts: its model's name, tokens of prompt + output, samples a request."""

    model: str
    max_model_len: int
    max_n: int
    vocab_size: int = 256


@dataclass(frozen=True)
class CompletionRequest:
    """One request, checked: its prompt's token ids and how to sample them."""

    chat: bool
    prompt: tuple[int, ...]
    max_tokens: int
    temperature: float
    seed: int | None
    n: int
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    return_token_ids: bool


def parse_body(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RequestError(f"the body must be a JSON object, got {type(data).__name__}")
    return data


def _int(data: dict, key: str, lo: int, hi: int | None = None, default: int | None = None) -> int | None:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(f"must be an integer, got {json.dumps(value)[:40]}", param=key)
    if value < lo or (hi is not None and value > hi):
        allowed = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise RequestError(f"must be {allowed}, got {value}", param=key)
    return value


def _number(data: dict, key: str, lo: float, hi: float, default: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise RequestError(f"must be a number, got {json.dumps(value)[:40]}", param=key)
    if not lo <= value <= hi:
        raise RequestError(f"must be between {lo:g} and {hi:g}, got {value}", param=key)
    return float(value)


def _temperature(data: dict) -> float:
    """OpenAI's default 1; below GREEDY_BELOW it is greedy (vLLM's rule: 1/t would overflow)."""
    t = _number(data, "temperature", 0.0, 2.0, 1.0)
    return 0.0 if t < GREEDY_BELOW else t


def _bool(data: dict, key: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"must be true or false, got {json.dumps(value)[:40]}", param=key)
    return value


def _stop(data: dict) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError("must be a non-empty string or a list of them", param="stop")
    if len(stops) > MAX_STOP_STRINGS:
        raise RequestError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}", param="stop")
    return tuple(stops)


def _prompt_tokens(prompt: Any, vocab_size: int) -> tuple[int, ...]:
    """A string's UTF-8 bytes, or a list of token ids (also one of each inside a list)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        tokens = tuple(prompt.encode("utf-8", errors="surrogatepass"))
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"token ids must be in [0, {vocab_size}), got {bad[0]}", param="prompt")
        tokens = tuple(prompt)
    else:
        raise RequestError(
            "must be a string or a list of token ids (one prompt a request here)", param="prompt"
        )
    if not tokens:
        raise RequestError("must hold at least one token", param="prompt")
    return tokens


def chat_prompt(messages: Any) -> str:
    """The template of the module doc over OpenAI's `messages`."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("must be a non-empty list of messages", param="messages")
    lines = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError("must be an object with role and content", param=where)
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise RequestError(f"role must be one of {', '.join(ROLES)}, got {role!r}"[:120], param=where)
        if isinstance(content, list):  # content parts: text only
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                for p in content
            ):
                raise RequestError("content parts must be text parts", param=f"{where}.content")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise RequestError("content must be a string", param=f"{where}.content")
        lines.append(f"{role}: {content}\n")
    return "".join(lines) + "assistant:"


def parse_request(data: dict, limits: Limits, chat: bool) -> CompletionRequest:
    """The request of a /v1/completions (chat false) or /v1/chat/completions body."""
    model = data.get("model")
    if not isinstance(model, str):
        raise RequestError("must name the model (GET /v1/models lists it)", param="model")
    if model != limits.model:
        raise RequestError(
            f"the model {model!r} does not exist; this server serves {limits.model!r}"[:200],
            param="model",
            status=404,
            code="model_not_found",
        )
    if chat:
        prompt = _prompt_tokens(chat_prompt(data.get("messages")), limits.vocab_size)
    else:
        if "prompt" not in data:
            raise RequestError("is required", param="prompt")
        prompt = _prompt_tokens(data["prompt"], limits.vocab_size)
    room = limits.max_model_len - len(prompt)
    if room < 1:
        raise RequestError(
            f"this model's maximum context length is {limits.max_model_len} tokens; the prompt has {len(prompt)}",
            param="messages" if chat else "prompt",
        )
    key = "max_completion_tokens" if chat and data.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _int(data, key, 1, default=room if chat else min(DEFAULT_COMPLETION_TOKENS, room))
    assert max_tokens is not None
    if max_tokens > room:
        raise RequestError(
            f"this model's maximum context length is {limits.max_model_len} tokens; {len(prompt)} in the "
            f"prompt and {max_tokens} asked for leave room for {room}",
            param=key,
        )
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("must be an object", param="stream_options")
    return CompletionRequest(
        chat=chat,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=_temperature(data),
        seed=_int(data, "seed", 0, 2**63 - 1),
        n=_int(data, "n", 1, limits.max_n, 1) or 1,
        stop=_stop(data),
        stream=_bool(data, "stream"),
        include_usage=_bool(options or {}, "include_usage"),
        return_token_ids=_bool(data, "return_token_ids"),
    )


def error_body(e: RequestError) -> dict:
    kind = "NotFoundError" if e.status == 404 else "invalid_request_error"
    return {"error": {"message": e.message, "type": kind, "param": e.param or None, "code": e.code or None}}
