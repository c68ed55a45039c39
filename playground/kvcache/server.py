"""The KV-cache server: a pool of token slots that really holds KV data, an allocation policy
deciding where each sequence's tokens live, optionally a model served from that pool, and a thin
ZeroMQ ROUTER loop in front.

`Server.handle(client, frames) -> reply frames` does all the work and touches no socket, so
tests drive it directly with several client identities. With a model, `generate` requests go to
the engine (llm_engine.py) and are answered when they finish: `handle` returns None for them and
`step()` runs one engine step and returns the (client, reply frames) of the requests it finished.
`serve()` is the loop: poll (without waiting while the engine has work), handle, reply, step,
expire leases. Standalone:
    python -m playground.kvcache.server --bind tcp://127.0.0.1:5555 --policy paged
    python -m playground.kvcache.server --random-model --context 512     # serve generate

Lease rule (a client that vanishes must not leak blocks): every request from a client identity
renews its lease; a client silent for longer than `lease_s` loses it, and every sequence it
created or forked is freed, and every generate request it is waiting for is dropped (its
sequences freed). A live client that is idle, or waits for a long generate, sends `ping`.
"""

import argparse
import time
from dataclasses import replace

import zmq

from playground.errors import PlaygroundError, UsageError
from playground.kvcache import protocol as P
from playground.kvcache.attention import KERNELS, decode_attention, run_table
from playground.kvcache.kv_pool import KVLayout, KVPool
from playground.kvcache.llm_engine import LLMEngine
from playground.kvcache.policies import POLICIES, make_policy
from playground.kvcache.scheduler import DEFAULT_ENGINE, EngineConfig
from playground.kvcache.sequence import Request, SamplingParams
from playground.transformer.model import Transformer

_MUTATING = ("create", "append", "fork", "free")


class Server:
    def __init__(
        self,
        policy: str = "paged",
        capacity_tokens: int = 200_000,
        block_size: int = 16,
        width: int = 8,
        lease_s: float | None = 30.0,
        enable_prefix_caching: bool = False,
        max_new_tokens: int = 2048,
        growth: float = 1.5,
        sample_every_s: float = 0.002,
        check_invariants: bool = False,
        clock=time.monotonic,
        *,
        layout: KVLayout | None = None,
        model: Transformer | None = None,
        engine_config: EngineConfig = DEFAULT_ENGINE,
    ):
        """`layout` makes the KV attendable (`attend`); a `model` serves `generate` and sets the
        layout (its layers, heads, head_dim) and the width (layers x 2 x heads x head_dim)."""
        self.policy_name = policy
        self.policy = make_policy(
            policy, capacity_tokens, block_size, enable_prefix_caching, max_new_tokens, growth
        )
        if model is not None:
            c = model.config
            layout = KVLayout(c.layers, c.heads, c.head_dim)
            if c.dtype != "float32":
                raise UsageError(
                    f"the pool holds float32 KV; serve a float32 model, got {c.dtype}", field="model"
                )
        if layout is not None and width in (None, layout.width):
            width = layout.width
        self.block_size, self.width, self.lease_s = block_size, width, lease_s
        self.max_new_tokens = max_new_tokens
        self.pool = KVPool(self.policy.capacity_slots, width, layout)
        self.layout, self.model, self.kernel = layout, model, engine_config.kernel
        self.engine = None
        if model is not None:
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
        self.clock, self.check_invariants = clock, check_invariants
        self.owner: dict[int, bytes] = {}  # seq_id -> client identity that holds its lease
        self.last_seen: dict[bytes, float] = {}
        self.next_seq_id = 0
        self.num_ops = 0
        self.num_refused = 0  # out_of_memory replies
        self.errors: dict[str, int] = {}
        self.num_expired_seqs = 0
        self.num_freed_seqs = 0
        self.peak_live_seqs = 0
        self.start_s = clock()
        self.sample_every_s, self.last_sample_s = sample_every_s, -1e9
        self.samples: list[tuple] = []  # (t_s, live_seqs, used_slots, allocated_slots, largest_free_run)

    def __repr__(self):
        model = f", serving {self.model.config}" if self.model is not None else ""
        return (
            f"Server({self.policy_name}, {len(self.owner)} seqs, {self.policy.capacity_slots} slots{model})"
        )

    def _new_seq_ids(self, k: int) -> list[int]:
        ids = list(range(self.next_seq_id, self.next_seq_id + k))
        self.next_seq_id += k
        return ids

    # -- the request handler ---------------------------------------------------------------
    def handle(self, client: bytes, frames: list) -> list[bytes] | None:
        """The reply frames, or None for a generate request (answered by a later `step`)."""
        now = self.clock()
        self.last_seen[client] = now
        self.num_ops += 1
        self._engine_stalled = False
        req_id = None
        try:
            req = P.decode_request(frames)
            req_id = req.header.get("id")
            reply = getattr(self, f"_op_{req.op}")(client, req)
            if reply is None:
                return None
            reply.setdefault("ok", True)
            reply["id"] = req_id
            kv = reply.pop("_kv", None)
            frames_out = P.encode_reply(reply, kv)
            if req.op in _MUTATING:
                self._sample(now, force=False)
                if self.check_invariants:
                    self.policy.check_invariants()
            return frames_out
        except P.ProtocolError as e:
            self.errors[e.code] = self.errors.get(e.code, 0) + 1
            self.num_refused += e.code == P.OUT_OF_MEMORY
            return P.error_reply(req_id, e.code, str(e), **e.extra)

    def _seq(self, header: dict, name: str = "seq_id") -> int:
        seq_id = P.get_int(header, name)
        if seq_id not in self.owner:  # a client's own sequences only, never the engine's
            raise P.ProtocolError(
                P.UNKNOWN_SEQUENCE,
                f"{header['op']}: no sequence {seq_id} (never created, freed, or its client's lease expired)",
            )
        return seq_id

    def _oom(self, op: str, what: str, fits_when_empty: bool) -> P.ProtocolError:
        _, allocated, largest = self.policy.usage()
        free = self.policy.capacity_slots - allocated
        return P.ProtocolError(
            P.OUT_OF_MEMORY,
            f"{op}: no room for {what} ({self.policy_name}: {free} slots free, largest free run {largest})",
            fits_when_empty=fits_when_empty,
            free_slots=free,
        )

    def _free_slots(self) -> int:
        return self.policy.capacity_slots - self.policy.allocated_slots()

    def _op_ping(self, client, req) -> dict:
        layout = self.layout.to_dict() if self.layout else {"layers": None, "heads": None, "head_dim": None}
        return {
            "policy": self.policy_name,
            "block_size": self.block_size,
            "width": self.width,
            "dtype": "float32",
            "capacity_slots": self.policy.capacity_slots,
            "lease_s": self.lease_s,
            **layout,
            "model": self.model.config.to_dict() if self.model is not None else None,
        }

    def _op_create(self, client, req) -> dict:
        h = req.header
        n = P.get_int(h, "num_tokens", minimum=1)
        max_new = P.get_int(h, "max_new_tokens", optional=True)
        tokens = h.get("tokens")
        if tokens is not None and (not isinstance(tokens, list) or len(tokens) != n):
            raise P.ProtocolError(P.BAD_REQUEST, f"create: field 'tokens' must be a list of {n} token ids")
        kv = P.kv_array(req, n, self.width)
        if not self.policy.can_allocate(n, tokens, max_new):
            raise self._oom("create", f"a {n}-token prompt", self.policy.fits_when_empty(n, max_new))
        (seq_id,) = self._new_seq_ids(1)
        num_cached = self.policy.allocate(seq_id, n, tokens, max_new)
        self.pool.write(self.policy.slots(seq_id, num_cached, n), kv[num_cached:])
        self.owner[seq_id] = client
        self.peak_live_seqs = max(self.peak_live_seqs, len(self.owner))
        return {"seq_id": seq_id, "num_cached_tokens": num_cached, "free_slots": self._free_slots()}

    def _op_append(self, client, req) -> dict:
        h = req.header
        seq_ids, counts = P.get_int_list(h, "seq_ids"), P.get_int_list(h, "num_tokens")
        if len(seq_ids) != len(counts) or len(set(seq_ids)) != len(seq_ids):
            raise P.ProtocolError(
                P.BAD_REQUEST,
                "append: 'seq_ids' (distinct) and 'num_tokens' must be lists "
                f"of one length, got {len(seq_ids)} and {len(counts)}",
            )
        for s in seq_ids:
            if s not in self.owner:
                raise P.ProtocolError(P.UNKNOWN_SEQUENCE, f"append: no sequence {s}")
        kv = P.kv_array(req, sum(counts), self.width)
        old_lengths = [self.policy.length(s) for s in seq_ids]
        copies = self.policy.append_batch(dict(zip(seq_ids, counts, strict=True)))  # all or nothing
        if copies is None:
            fits = not getattr(self.policy, "reserve_max", False) or all(
                self.policy.length(s) + n <= self.policy.runs[s][1]
                for s, n in zip(seq_ids, counts, strict=True)
            )
            raise self._oom(
                "append",
                f"{sum(counts)} tokens in {len(seq_ids)} sequences"
                + ("" if fits else " (past a sequence's reserved maximum)"),
                fits,
            )
        self.pool.copy(copies)  # in planning order: each source is read before a later copy reuses it
        slots, lengths = [], []
        for s, n, old in zip(seq_ids, counts, old_lengths, strict=True):
            slots += self.policy.slot_list(s, old, old + n)
            lengths.append(old + n)
        self.pool.write(slots, kv)  # one scatter for the whole batch
        return {"lengths": lengths, "free_slots": self._free_slots()}

    def _op_fork(self, client, req) -> dict:
        seq_id = self._seq(req.header)
        k = P.get_int(req.header, "num_children", minimum=1)
        if not self.policy.can_fork(seq_id, k):
            raise self._oom("fork", f"{k} copies of sequence {seq_id}", True)
        child_ids = self._new_seq_ids(k)
        self.pool.copy(self.policy.fork(seq_id, child_ids))
        for child in child_ids:
            self.owner[child] = client
        self.peak_live_seqs = max(self.peak_live_seqs, len(self.owner))
        return {"child_ids": child_ids}

    def _op_read(self, client, req) -> dict:
        seq_id = self._seq(req.header)
        n = self.policy.length(seq_id)
        return {
            "num_tokens": n,
            "width": self.width,
            "dtype": "float32",
            "_kv": self.pool.read(self.policy.slots(seq_id)),
        }

    def _op_free(self, client, req) -> dict:
        seq_ids = P.get_int_list(req.header, "seq_ids")
        for s in seq_ids:  # check all first: a refused free changes nothing
            if s not in self.owner:
                raise P.ProtocolError(P.UNKNOWN_SEQUENCE, f"free: no sequence {s}")
        for s in seq_ids:
            self.policy.free(s)
            del self.owner[s]
        self.num_freed_seqs += len(seq_ids)
        return {"freed": len(seq_ids), "free_slots": self._free_slots()}

    def _op_stats(self, client, req) -> dict:
        """With `reset_peaks: true` the engine's peaks start again after this reply (a client
        measuring one phase at a time)."""
        stats = self.stats()
        if req.header.get("reset_peaks") is True and self.engine is not None:
            self.engine.reset_peaks()
        return stats

    def _op_attend(self, client, req) -> dict:
        h = req.header
        if self.layout is None:
            raise P.ProtocolError(
                P.BAD_REQUEST,
                f"attend: this server holds opaque KV of width {self.width}; start it with an attention "
                "layout (--layers, --heads) or a model",
            )
        seq_ids = P.get_int_list(h, "seq_ids")
        layer = P.get_int(h, "layer")
        if not seq_ids:
            raise P.ProtocolError(P.BAD_REQUEST, "attend: field 'seq_ids' must name at least one sequence")
        if layer >= self.layout.layers:
            raise P.ProtocolError(
                P.BAD_REQUEST, f"attend: field 'layer' must be in [0, {self.layout.layers}), got {layer}"
            )
        for s in seq_ids:
            if s not in self.owner:
                raise P.ProtocolError(P.UNKNOWN_SEQUENCE, f"attend: no sequence {s}")
        q = P.query_array(req, len(seq_ids), self.layout.heads, self.layout.head_dim)
        runs = run_table(self.policy, seq_ids)
        out = decode_attention(q, self.pool.keys(layer), self.pool.values(layer), runs, self.kernel)
        return {
            "num_seqs": len(seq_ids),
            "heads": self.layout.heads,
            "head_dim": self.layout.head_dim,
            "lengths": runs.seq_lens.tolist(),
            "_kv": out,
        }

    def _op_generate(self, client, req) -> None:
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
        config = self.model.config
        prompt = P.get_prompt(h, config.vocab_size)
        params = SamplingParams(
            max_new_tokens=P.get_int(h, "max_new_tokens", minimum=1),
            n=P.get_int(h, "n", minimum=1, optional=True) or 1,
            temperature=P.get_number(h, "temperature", minimum=0.0, default=0.0),
            seed=P.get_int(h, "seed", optional=True) or 0,
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
        self.engine.add_request(client, req.header.get("id"), prompt, params)
        return None

    # -- the engine ------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether `step` would do something: the engine holds requests, and its last step was
        not one that fitted nothing with nothing changed since (then the loop waits to poll)."""
        return self.engine is not None and self.engine.has_work() and not self._engine_stalled

    def step(self) -> list[tuple[bytes, list[bytes]]]:
        """One engine step: (client, reply frames) of every request it finished. A bug in the
        engine fails the requests it held with internal_error replies, not the server."""
        try:
            finished, num_tokens = self.engine.step()
        except Exception as e:
            self.errors[P.INTERNAL_ERROR] = self.errors.get(P.INTERNAL_ERROR, 0) + 1
            out = []
            for request in list(self.engine.requests.values()):
                self.engine.abort(request.client)
                out.append(
                    (
                        request.client,
                        P.error_reply(request.reply_id, P.INTERNAL_ERROR, f"{type(e).__name__}: {e}"),
                    )
                )
            return out
        self._engine_stalled = num_tokens == 0
        if num_tokens:
            self._sample(self.clock(), force=False)
            if self.check_invariants:
                self.policy.check_invariants()
        return [(r.client, P.encode_reply(generate_reply(r))) for r in finished]

    # -- leases, accounting ----------------------------------------------------------------
    def expire_leases(self, now: float | None = None) -> list[int]:
        """Free every sequence of each client silent for more than lease_s; returns their ids."""
        if self.lease_s is None:
            return []
        now = self.clock() if now is None else now
        gone = {c for c, t in self.last_seen.items() if now - t > self.lease_s}
        if not gone:
            return []
        freed = [s for s, c in self.owner.items() if c in gone]
        for s in freed:
            self.policy.free(s)
            del self.owner[s]
        for c in gone:
            del self.last_seen[c]
            if self.engine is not None:
                self.num_expired_seqs += self.engine.abort(c)
        self.num_expired_seqs += len(freed)
        self._engine_stalled = False
        self._sample(now, force=True)
        return freed

    def _sample(self, now: float, force: bool) -> None:
        if force or now - self.last_sample_s >= self.sample_every_s:
            self.last_sample_s = now
            live = len(self.owner) + (self.engine.running() if self.engine is not None else 0)
            self.samples.append((now - self.start_s, live, *self.policy.usage()))

    def stats(self) -> dict:
        return {
            "policy": self.policy_name,
            "block_size": self.block_size,
            "width": self.width,
            "live_seqs": len(self.owner),
            "peak_live_seqs": self.peak_live_seqs,
            "num_ops": self.num_ops,
            "refused": self.num_refused,
            "errors": dict(self.errors),
            "expired_seqs": self.num_expired_seqs,
            **self.policy.stats(),
            "engine": self.engine.stats() if self.engine is not None else None,
        }


def generate_reply(r: Request) -> dict:
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


def serve(server: Server, sock: zmq.Socket, stop=lambda: False, poll_ms: int = 50) -> None:
    """Answer requests on a ROUTER socket until stop() is true, running an engine step between
    two polls while the engine has work; never blocks longer than poll_ms."""
    envelopes: dict[bytes, list[bytes]] = {}  # a REQ client's delimiter frame, echoed in its replies
    while not stop():
        busy = server.has_work()
        if sock.poll(0 if busy else poll_ms):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                identity, body = frames[0].bytes, frames[1:]
                envelope = []
                if body and len(body[0]) == 0:  # a REQ client's delimiter: keep it for the reply
                    envelope, body = [b""], body[1:]
                envelopes[identity] = envelope
                try:
                    reply = server.handle(identity, [f.buffer for f in body])
                except Exception as e:  # a bug must not take the server down for every other client
                    server.errors[P.INTERNAL_ERROR] = server.errors.get(P.INTERNAL_ERROR, 0) + 1
                    reply = P.error_reply(None, P.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
                if reply is not None:
                    sock.send_multipart([identity, *envelope, *reply], copy=False)
        if busy:
            for identity, reply in server.step():
                sock.send_multipart([identity, *envelopes.get(identity, []), *reply], copy=False)
        if server.expire_leases() or len(envelopes) > 2 * len(server.last_seen) + 64:
            envelopes = {i: e for i, e in envelopes.items() if i in server.last_seen}


def build_model(args) -> Transformer | None:
    """The standalone server's model: a model.npz, or fixed random weights, or none."""
    from playground.transformer import ModelConfig, load_model

    if args.model:
        config, params = load_model(args.model)
        return Transformer(config, params)
    if args.random_model:
        config = ModelConfig(
            layers=args.layers or 2, d_model=args.d_model, heads=args.heads or 4, context=args.context
        )
        return Transformer(config, seed=args.seed)
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m playground.kvcache.server", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bind", default="tcp://127.0.0.1:5555", help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:*")
    ap.add_argument("--policy", default="paged", choices=list(POLICIES))
    ap.add_argument("--capacity-tokens", type=int, default=200_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument(
        "--width", type=int, default=None, help="KV floats per token (default 8; a model sets it)"
    )
    ap.add_argument("--lease-s", type=float, default=30.0)
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=2048, help="reserve_max reserves prompt + this")
    m = ap.add_argument_group("attention and models")
    m.add_argument(
        "--layers", type=int, default=None, help="KV layout: layers (head_dim = width / (2 layers heads))"
    )
    m.add_argument("--heads", type=int, default=None, help="KV layout: heads per layer")
    m.add_argument("--model", default=None, metavar="FILE", help="serve this model.npz (generate)")
    m.add_argument("--random-model", action="store_true", help="serve fixed random weights (generate)")
    m.add_argument("--d-model", type=int, default=64, help="random model: width (default 64)")
    m.add_argument("--context", type=int, default=1024, help="random model: context (default 1024)")
    m.add_argument("--seed", type=int, default=0, help="random model: the weights' seed")
    m.add_argument("--kernel", choices=KERNELS, default="native", help="decode attention kernel")
    args = ap.parse_args(argv)
    try:
        model = build_model(args)
        layout = None
        width = args.width if args.width is not None else (None if model is not None else 8)
        if model is None and (args.layers or args.heads):
            layers, heads = args.layers or 1, args.heads or 1
            if width % (2 * layers * heads):
                raise UsageError(
                    f"{width} is not layers x 2 x heads x head_dim for {layers} layers, {heads} heads",
                    field="--width",
                )
            layout = KVLayout(layers, heads, width // (2 * layers * heads))
        server = Server(
            args.policy,
            args.capacity_tokens,
            args.block_size,
            width,
            args.lease_s,
            args.prefix_caching,
            args.max_new_tokens,
            layout=layout,
            model=model,
            engine_config=replace(EngineConfig(), kernel=args.kernel),
        )
    except (UsageError, PlaygroundError) as e:
        ap.error(str(e))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    sock.bind(args.bind)
    print(f"serving {server!r} on {sock.getsockopt_string(zmq.LAST_ENDPOINT)}", flush=True)
    try:
        serve(server, sock)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close(0)
        ctx.term()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
