"""A KV-cache server that also serves a model: `generate` requests run on an engine
(engine/llm_engine.py) over the server's own pool and policy, beside the clients' own sequences.

`handle` returns None for a generate request: it is answered when it finishes, by `step()`, which
runs one engine step and returns the (client, reply frames) of the requests that step finished.
The model sets the pool's layout (its layers, heads, head_dim) and width (layers x 2 x heads x
head_dim). A client whose lease expires loses the requests it waits for; their sequences are
freed.

Each generate id is answered once (answers.py): a request re-sent under its id while it runs gets
its one reply when it finishes, and once it has finished the same reply again; with a journal, also
from a server restarted after a crash.
"""

import time

from playground.core.errors import UsageError
from playground.kvcache.engine.config import DEFAULT_ENGINE, EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.sequence import GenerateRequest, SamplingParams
from playground.kvcache.server import protocol as P
from playground.kvcache.server.answers import PER_CLIENT, AnswerTable, Seen, request_key
from playground.kvcache.server.kv_ops import KVServer
from playground.transformer.model import Transformer


class ModelServer(KVServer):
    def __init__(
        self,
        policy: str,
        capacity_tokens: int,
        block_size: int,
        model: Transformer,
        *,
        lease_s: float | None = 30.0,
        enable_prefix_caching: bool = False,
        max_new_tokens: int = 2048,
        growth: float = 1.5,
        check_invariants: bool = False,
        clock=time.monotonic,
        engine_config: EngineConfig = DEFAULT_ENGINE,
        journal: str | None = None,
        answers_per_client: int = PER_CLIENT,
    ):
        """`journal`: the file the finished-id table is kept in (answers.py), so that a server
        started again on it answers what the old one finished."""
        c = model.config
        if c.dtype != "float32":
            raise UsageError(
                f"the pool holds float32 KV; serve a float32 model, got {c.dtype}", field="model"
            )
        super().__init__(
            policy,
            capacity_tokens,
            block_size,
            None,
            lease_s,
            enable_prefix_caching,
            max_new_tokens,
            growth,
            check_invariants=check_invariants,
            clock=clock,
            layout=KVLayout(c.layers, c.heads, c.head_dim),
            kernel=engine_config.kernel,
        )
        self.model = model
        self.engine = LLMEngine(
            model,
            self.policy,
            self.pool,
            engine_config,
            new_seq_ids=self._new_seq_ids,
            prefix_caching=enable_prefix_caching,
            clock=clock,
        )
        self._engine_stalled = False  # the last step fitted nothing and nothing changed since
        self._failed: list[
            tuple[bytes, object, list[bytes]]
        ] = []  # (client, id, error reply): the next step's
        self.answers = AnswerTable(journal, answers_per_client)
        for known in self.answers.clients():  # a journal's clients: forgotten if they never come back
            self.last_seen[known] = self.clock()

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, serving {self.model.config})"

    def handle(self, client: bytes, frames: list) -> list[bytes] | None:
        self._engine_stalled = False
        return super().handle(client, frames)

    def _op_ping(self, client, req) -> dict:
        return {
            **super()._op_ping(client, req),
            "model": self.model.config.to_dict(),
            "max_n": self.engine.config.max_num_seqs,
        }

    def held_requests(self, client: bytes) -> list:
        """Requests in the engine, and those dropped whose error reply the next step sends."""
        held = [r.reply_id for r in self.engine.requests.values() if r.client == client]
        return held + [reply_id for c, reply_id, _ in self._failed if c == client]

    def _op_stats(self, client, req) -> dict:
        """With `reset_peaks: true` the engine's peaks start again after this reply (a client
        measuring one phase at a time)."""
        stats = self.stats()
        if req.header.get("reset_peaks") is True:
            self.engine.reset_peaks()
        return stats

    def _op_generate(self, client, req) -> dict | None:
        h = req.header
        if self.engine is None:
            raise P.ProtocolError(
                P.NO_MODEL,
                "generate: this server serves no model (start it with --model FILE or --random-model)",
            )
        if req.kv_bytes is not None:
            raise P.ProtocolError(
                P.BAD_FRAME, "generate: takes no data frame (the prompt goes in the header)"
            )
        key = request_key(client, h.get("id"))
        if key is not None:
            seen, answer = self.answers.seen(key, h)
            if answer is not None:  # Seen.ANSWERED
                return {**answer, "replayed": True}
            if seen is Seen.RUNNING:
                return None  # its one reply comes when it finishes
        config = self.model.config
        prompt = P.get_prompt(h, config.vocab_size)
        params = SamplingParams(
            max_new_tokens=P.get_int(h, "max_new_tokens", minimum=1),
            n=P.get_optional_int(h, "n", minimum=1) or 1,
            temperature=P.get_number(h, "temperature", minimum=0.0, default=0.0),
            seed=P.get_optional_int(h, "seed") or 0,
            share_prompt=P.get_bool(h, "share_prompt", default=True),
        )
        if params.max_new_tokens > self.max_new_tokens:
            raise P.ProtocolError(
                P.BAD_REQUEST,
                f"generate: field 'max_new_tokens' must be <= {self.max_new_tokens} (the server's maximum), "
                f"got {params.max_new_tokens}",
            )
        if params.n > self.engine.config.max_num_seqs:
            raise P.ProtocolError(
                P.BAD_REQUEST,
                f"generate: field 'n' must be <= {self.engine.config.max_num_seqs} (the engine's max_num_seqs), "
                f"got {params.n}",
            )
        longest = min(len(prompt) + params.max_new_tokens - 1, config.context)  # KV one sample holds
        if not self.policy.fits_when_empty(longest):
            raise P.ProtocolError(
                P.OUT_OF_MEMORY,
                f"generate: one sample holds the KV of up to {longest} tokens, which takes "
                f"{self.policy.slots_needed(longest)} slots: more than the pool has "
                f"({self.policy_name}, {self.policy.capacity_slots} slots)",
                fits_when_empty=False,
                free_slots=self._free_slots(),
            )
        self.engine.add_request(client, h.get("id"), prompt, params)
        if key is not None:
            self.answers.start(key, h)
        return None

    # -- the engine ------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether `step` would do something: error replies to send, or the engine holds requests
        and its last step was not one that fitted nothing with nothing changed since (then the
        loop waits to poll)."""
        return bool(self._failed) or (self.engine.has_work() and not self._engine_stalled)

    def step(self) -> list[tuple[bytes, list[bytes]]]:
        """One engine step: (client, reply frames) of every request it finished, after the error
        replies of requests dropped since the last step. A bug in the engine fails the requests it
        held with internal_error replies, not the server."""
        out, self._failed = [(client, frames) for client, _, frames in self._failed], []
        if not self.engine.has_work():
            return out
        try:
            finished, num_tokens = self.engine.step()
        except Exception as e:
            self.errors[P.INTERNAL_ERROR] = self.errors.get(P.INTERNAL_ERROR, 0) + 1
            self._fail(self.engine.abort()[0], P.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
            return out + self.step()
        self._engine_stalled = num_tokens == 0
        if num_tokens:
            self._sample(self.clock(), force=False)
            if self.check_invariants:
                self.policy.check_invariants()
        return out + [(r.client, self._answer(r, generate_reply(r))) for r in finished]

    def _answer(self, r: GenerateRequest, header: dict) -> list[bytes]:
        """The request's one reply, kept in the finished-id table (and its journal) before it is
        sent."""
        key = request_key(r.client, r.reply_id)
        if key is not None:
            self.answers.finish(key, header)
        if header["ok"]:
            return self.reply_frames(header)
        return self.error_frames(r.reply_id, header["error"], header["message"])

    def _fail(self, requests: list[GenerateRequest], code: str, message: str) -> None:
        """Error replies for these requests, sent by the next `step` (their client may be gone:
        a ROUTER drops a message to an identity it does not know)."""
        self._failed += [
            (r.client, r.reply_id, self._answer(r, error_header(r.reply_id, code, message))) for r in requests
        ]

    def _drop_client(self, client: bytes) -> int:
        self._engine_stalled = False
        requests, num_seqs = self.engine.abort(client)
        self.answers.forget(client)  # before the replies: a forgotten client's are not kept
        self._fail(
            requests,
            P.LEASE_EXPIRED,
            f"generate: dropped, the client was silent for more than {self.lease_s:g} s",
        )
        return num_seqs

    def _running_seqs(self) -> int:
        return self.engine.running()

    def stats(self) -> dict:
        a = self.answers
        answers = {"running": len(a.running), "answered": a.num_answers, "replayed": a.num_replayed,
                   "attached": a.num_attached, "loaded": a.num_loaded}  # fmt: skip
        return {**super().stats(), "engine": self.engine.stats(), "answers": answers}

    def close(self) -> None:
        self.answers.close()


def error_header(req_id, code: str, message: str) -> dict:
    return {"ok": False, "id": req_id, "error": code, "message": message}


def generate_reply(r: GenerateRequest) -> dict:
    """A finished request's reply: each sample's tokens (and their bytes as text), and the times
    a client of a serving system looks at, in seconds from the request's arrival at the server."""
    since = lambda t: round(t - r.arrival_s, 6)  # noqa: E731
    times = [[since(t) for t in s.token_times_s] for s in r.seqs]
    return {
        "ok": True,
        "id": r.reply_id,
        "tokens": [s.token_ids[len(r.prompt) :] for s in r.seqs],
        "text": [
            bytes(t % 256 for t in s.token_ids[len(r.prompt) :]).decode(errors="replace") for s in r.seqs
        ],
        "num_prompt_tokens": len(r.prompt),
        "num_cached_tokens": r.num_cached_prompt_tokens,
        "queue_s": since(r.admitted_s),
        "ttft_s": since(r.first_token_s),
        "e2e_s": since(r.finished_s),
        "tpot_s": [(t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None for t in times],
        "token_times_s": times,
        "preempted": r.num_preemptions,
    }
