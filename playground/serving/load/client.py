"""One request as a user's client sends it, timed: a streaming completion over HTTP (httpx).

Each request streams (`stream: true`, usage in the last chunk) so the client sees its first token
and the gaps between the next ones; `RequestRecord` keeps, relative to when it was sent: the first
token (TTFT), each later chunk (the inter-token latencies, ITL, vLLM's "time between tokens"),
the end (E2E), and the tokens the server says it generated. TPOT is (E2E - TTFT) / (tokens - 1).
A request that fails keeps its error; the sweep counts it against goodput.
"""

import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class RequestRecord:
    sent_s: float  # when it was sent, on the sweep's clock
    prompt_tokens: int
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    itl_s: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.e2e_s is not None

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        assert self.e2e_s is not None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


async def send_request(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], max_tokens: int, sent_s: float
) -> RequestRecord:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    record = RequestRecord(sent_s, len(prompt))
    t0 = time.perf_counter()
    last = t0
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            if r.status_code != 200:
                record.error = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
                return record
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                now = time.perf_counter()
                if chunk.get("usage"):
                    record.output_tokens = chunk["usage"]["completion_tokens"]
                if "error" in chunk:
                    record.error = chunk["error"].get("message", "error")
                if not any(c.get("text") for c in chunk.get("choices", ())):
                    continue
                if record.ttft_s is None:
                    record.ttft_s = now - t0
                else:
                    record.itl_s.append(now - last)
                last = now
        record.e2e_s = time.perf_counter() - t0
    except httpx.HTTPError as e:
        record.error = f"{type(e).__name__}: {e}"
    return record
