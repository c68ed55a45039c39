"""What a client rank of the serving lab runs: generate requests to the server's model, the
replies' times, and the checks a client can make on its own.

Workloads (the serving node's `params.workload`):
- `section46`: the lecture's 4.6 requests (prompts of 50-499 tokens of the lecture's text,
  outputs geometric around 200), each client sending its share at once and collecting the
  replies as they come: the server's memory decides how many run together. The `show_texts`
  requests with the longest outputs, and `params.prompt`'s own request, return their text.
- `samples`: exercise 10 with generated tokens: one prompt, `n` samples as one request (forked,
  copy-on-write) and as `n` separate requests (copies), the server's peak memory for each.
- `prefix`: every prompt starts with the same system prompt; each client keeps `in_flight`
  requests outstanding (a closed loop).
- `batch`: for each batch size B, B requests at once: the time between two tokens is one decode
  step of a batch of B.
Each request's id names what it is (`r<key>`, `p<key>`, `b<batch>-<k>`, the samples' mode), the
same when a restarted run sends it again (serving/resume.py). Each reply is checked where a client
can check it: sample i of a request equals
`playground.transformer.generate(model, prompt, max_new_tokens, temperature, seed + i)` for every
`verify_every`-th request, and a digest of its tokens goes back so that rank 0 can check that
every policy generated the same tokens.
"""

import time
import zlib

import numpy as np

from playground.kvcache.server.client import KVClient, KVServerError, RequestId
from playground.kvcache.workloads import RequestSpec, section46_requests, text_prompt
from playground.transformer.generate import generate

SYSTEM_PROMPT_KEY = 0


def digest(tokens: list[int]) -> int:
    return zlib.crc32(np.asarray(tokens, dtype=np.int64).tobytes())


def request_row(header: dict) -> dict:
    """What the report needs of one reply (not its tokens: a digest per sample)."""
    if not header.get("ok"):
        return {"ok": False, "error": header.get("error"), "message": header.get("message")}
    return {
        "ok": True,
        "queue_s": header["queue_s"],
        "ttft_s": header["ttft_s"],
        "e2e_s": header["e2e_s"],
        "tpot_s": header["tpot_s"][0],
        "num_tokens": sum(len(t) for t in header["tokens"]),
        "num_prompt_tokens": header["num_prompt_tokens"],
        "num_cached_tokens": header["num_cached_tokens"],
        "preempted": header["preempted"],
        "digests": [digest(t) for t in header["tokens"]],
    }


class Checker:
    """Compares the served samples of every `every`-th request with dense generation."""

    def __init__(self, model, every: int):
        self.model, self.every = model, every
        self.checked = self.mismatched = 0
        self.first_mismatch: str | None = None

    def check(
        self, key: int, prompt, header: dict, max_new_tokens: int, temperature: float, seed: int
    ) -> None:
        if not self.every or key % self.every or not header.get("ok"):
            return
        for i, tokens in enumerate(header["tokens"]):
            want = generate(
                self.model, prompt, max_new_tokens, temperature=temperature, seed=seed + i
            ).tolist()
            self.checked += 1
            if tokens != want:
                self.mismatched += 1
                at = next(
                    (k for k, (a, b) in enumerate(zip(tokens, want, strict=False)) if a != b), len(want)
                )
                self.first_mismatch = (
                    self.first_mismatch or f"request {key} sample {i}: differs at token {at}"
                )

    def result(self) -> dict:
        return {"checked": self.checked, "mismatched": self.mismatched, "first_mismatch": self.first_mismatch}


OWN_PROMPT = -1  # the req_id of `params.prompt`'s request


def run_section46(comm, client: KVClient, p, checker: Checker) -> dict:
    reqs = section46_requests(p.num_requests, p.prompt_min, p.prompt_max, p.output_mean, p.output_cap, p.seed)
    shown = {OWN_PROMPT, *(r.req_id for r in sorted(reqs, key=lambda r: -r.output_len)[: p.show_texts])}
    mine = reqs[comm.rank - 1 :: comm.size - 1]
    if p.prompt is not None and comm.rank == 1:
        mine = [RequestSpec(OWN_PROMPT, len(p.prompt.encode("utf-8")), p.new_tokens), *mine]
    prompts = {r.req_id: text_prompt(r.req_id, r.prompt_len) for r in mine if r.req_id != OWN_PROMPT}
    if p.prompt is not None:
        prompts[OWN_PROMPT] = list(p.prompt.encode("utf-8"))
    by_id = {}
    t0 = time.monotonic()
    for r in mine:
        rid = client.submit(
            prompts[r.req_id],
            r.output_len,
            request_id=f"r{r.req_id}",
            n=p.n,
            temperature=p.temperature,
            seed=abs(r.req_id),
        )
        by_id[rid] = r
    replies = client.collect(by_id)
    rows = []
    for rid, header in replies.items():
        r = by_id[rid]
        checker.check(r.req_id, prompts[r.req_id], header, r.output_len, p.temperature, abs(r.req_id))
        rows.append({"req_id": r.req_id, **request_row(header)})
        if header.get("ok") and r.req_id in shown:  # the report shows these (the longest outputs)
            rows[-1].update(prompt=prompts[r.req_id], tokens=header["tokens"][0])
    return {"requests": sorted(rows, key=lambda row: row["req_id"]), "elapsed_s": time.monotonic() - t0}


def run_samples(comm, client: KVClient, p, checker: Checker) -> dict:
    """Rank 1: one prompt, its n samples as n copies of the prompt, then forked from one."""
    if comm.rank != 1:
        return {"idle": True}
    prompt = text_prompt(1, p.sample_prompt_tokens)
    modes = []
    for mode in ("copies", "fork"):
        before, _ = client.check("stats", reset_peaks=True)
        t0 = time.monotonic()
        rid = client.submit(
            prompt,
            p.sample_tokens,
            request_id=mode,
            n=p.n,
            temperature=p.temperature,
            seed=p.seed,
            share_prompt=mode == "fork",
        )
        replies = [client.collect([rid])[rid]]
        elapsed_s = time.monotonic() - t0
        stats, _ = client.check("stats")
        for header in replies:
            if not header.get("ok"):
                raise KVServerError(header, op="generate")
        checker.check(0, prompt, replies[0], p.sample_tokens, p.temperature, p.seed)
        modes.append(
            {
                "mode": mode,
                "requests": [request_row(h) for h in replies],
                "peak_allocated_slots": stats["engine"]["peak_allocated_slots"],
                "peak_used_slots": stats["engine"]["peak_used_slots"],
                "cow_copies": stats["cow_copies"] - before["cow_copies"],
                "moved_slots": stats["moved_slots"] - before["moved_slots"],
                "elapsed_s": elapsed_s,
                "held_after": stats["allocated_slots"],
            }
        )
    return {"modes": modes}


def run_prefix(comm, client: KVClient, p, checker: Checker) -> dict:
    """A closed loop of `in_flight` requests, each the system prompt plus its own question."""
    system = text_prompt(SYSTEM_PROMPT_KEY, p.system_prompt_tokens)
    keys = list(range(comm.rank - 1, p.num_requests, comm.size - 1))
    prompts = {k: system + text_prompt(10_000 + k, p.user_prompt_tokens) for k in keys}
    by_id, rows, todo = {}, [], list(reversed(keys))

    def submit_next() -> list[RequestId]:
        if not todo:
            return []
        k = todo.pop()
        rid = client.submit(
            prompts[k], p.new_tokens, request_id=f"p{k}", n=p.n, temperature=p.temperature, seed=k
        )
        by_id[rid] = k
        return [rid]

    def on_reply(header: dict) -> list[RequestId]:
        k = by_id[header["id"]]
        checker.check(k, prompts[k], header, p.new_tokens, p.temperature, k)
        rows.append({"req_id": k, **request_row(header)})
        return submit_next()

    t0 = time.monotonic()
    first = [rid for _ in range(p.in_flight) for rid in submit_next()]
    client.collect(first, on_reply)
    return {"requests": sorted(rows, key=lambda row: row["req_id"]), "elapsed_s": time.monotonic() - t0}


def run_batch(comm, client: KVClient, p, checker: Checker) -> dict:
    """Rank 1: for each batch size B, B requests at once; the gaps between a reply's tokens are
    decode steps of B sequences."""
    if comm.rank != 1:
        return {"idle": True}
    batches = []
    for size in p.batch_sizes:
        ids = [
            client.submit(
                text_prompt(20_000 + b, p.prompt_min),
                p.new_tokens,
                request_id=f"b{size}-{b}",
                temperature=p.temperature,
                seed=b,
            )
            for b in range(size)
        ]
        t0 = time.monotonic()
        replies = client.collect(ids)
        elapsed_s = time.monotonic() - t0
        gaps = [g for h in replies.values() if h.get("ok") for g in np.diff(h["token_times_s"][0]).tolist()]
        failed = [h for h in replies.values() if not h.get("ok")]
        batches.append(
            {
                "batch": size,
                "step_gaps_s": gaps,
                "elapsed_s": elapsed_s,
                "failed": len(failed),
                "tokens": sum(len(t) for h in replies.values() if h.get("ok") for t in h["tokens"]),
            }
        )
    return {"batches": batches}


WORKLOADS = {"section46": run_section46, "samples": run_samples, "prefix": run_prefix, "batch": run_batch}


def run_workload(comm, client: KVClient, p, model) -> dict:
    checker = Checker(model, p.verify_every)
    result = WORKLOADS[p.workload](comm, client, p, checker)
    result["verified"] = checker.result()
    return result
