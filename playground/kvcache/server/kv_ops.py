"""The KV-cache server's KV ops: a pool of token slots that really holds KV data and an allocation
policy deciding where each sequence's tokens live; loop.py puts a ZeroMQ ROUTER loop in front of
it and generate.py a model behind it (`ModelServer`).

`KVServer.handle(client, frames) -> reply frames` does all the work and touches no socket, so
tests drive it directly with several client identities.

Lease rule (a client that vanishes must not leak blocks): every request from a client identity
renews its lease; a client silent for longer than `lease_s` loses it, and every sequence it
created or forked is freed (and, on a ModelServer, every generate request it waits for is
dropped). A live client that is idle, or waits for a long generate, sends `ping`.

Every reply carries the server's `instance_id` (new for every server object: a restarted process
has another), and `ping` says which of the client's generate requests the server holds, so a
client notices a restart, or a request that will never be answered, at its next ping.
"""

import time
import uuid

from playground.kvcache.engine.attention import decode_attention, run_table
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.server import protocol as P

_MUTATING = ("create", "append", "fork", "free")


class KVServer:
    def __init__(
        self,
        policy: str = "paged",
        capacity_tokens: int = 200_000,
        block_size: int = 16,
        width: int | None = 8,
        lease_s: float | None = 30.0,
        enable_prefix_caching: bool = False,
        max_new_tokens: int = 2048,
        growth: float = 1.5,
        sample_every_s: float = 0.002,
        check_invariants: bool = False,
        clock=time.monotonic,
        *,
        layout: KVLayout | None = None,
        kernel: str = "native",
    ):
        """`layout` makes the KV attendable (`attend`, with `kernel`); its width wins over
        `width` = None."""
        self.policy_name = policy
        self.policy = make_policy(
            policy, capacity_tokens, block_size, enable_prefix_caching, max_new_tokens, growth
        )
        if layout is not None and width in (None, layout.width):
            width = layout.width
        if width is None:
            raise ValueError("KVServer: width = None needs a layout")
        self.block_size, self.width, self.lease_s = block_size, width, lease_s
        self.max_new_tokens = max_new_tokens
        self.pool = KVPool(self.policy.capacity_slots, width, layout)
        self.layout, self.kernel = layout, kernel
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
        self.instance_id = uuid.uuid4().hex[:16]  # in every reply: a client sees a restart in it

    def __repr__(self):
        return f"{type(self).__name__}({self.policy_name}, {len(self.owner)} seqs, {self.policy.capacity_slots} slots)"

    def _new_seq_ids(self, k: int) -> list[int]:
        ids = list(range(self.next_seq_id, self.next_seq_id + k))
        self.next_seq_id += k
        return ids

    # -- the request handler ---------------------------------------------------------------
    def handle(self, client: bytes, frames: list) -> list[bytes] | None:
        """The reply frames, or None for a request answered later (a ModelServer's generate)."""
        now = self.clock()
        self.last_seen[client] = now
        self.num_ops += 1
        req_id = None
        try:
            req = P.decode_request(frames)
            req_id = req.header.get("id")
            reply = getattr(self, f"_op_{req.op}")(client, req)
            if reply is None:
                return None
            reply.setdefault("ok", True)
            reply["id"] = req_id
            frames_out = self.reply_frames(reply, reply.pop("_kv", None))
            if req.op in _MUTATING:
                self._sample(now, force=False)
                if self.check_invariants:
                    self.policy.check_invariants()
            return frames_out
        except P.ProtocolError as e:
            self.errors[e.code] = self.errors.get(e.code, 0) + 1
            self.num_refused += e.code == P.OUT_OF_MEMORY
            return self.error_frames(req_id if e.req_id is None else e.req_id, e.code, str(e), **e.extra)

    def reply_frames(self, header: dict, kv=None) -> list[bytes]:
        """A reply with this server's instance id. An `id` that cannot be encoded back (nested
        deeper than the encoder recurses) gets a bad_request reply without it."""
        try:
            return P.encode_reply({**header, "server": self.instance_id}, kv)
        except (RecursionError, ValueError, TypeError):
            self.errors[P.BAD_REQUEST] = self.errors.get(P.BAD_REQUEST, 0) + 1
            return self.error_frames(None, P.BAD_REQUEST, "field 'id' is nested too deep to echo")

    def error_frames(self, req_id, code: str, message: str, **extra) -> list[bytes]:
        header = {"ok": False, "id": req_id, "error": code, "message": message, **extra}
        try:
            return P.encode_reply({**header, "server": self.instance_id})
        except (RecursionError, ValueError, TypeError):
            return P.encode_reply({**header, "id": None, "server": self.instance_id})

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
        """The server's shape and limits, and the ids of `client`'s generate requests it holds."""
        layout = self.layout.to_dict() if self.layout else {"layers": None, "heads": None, "head_dim": None}
        return {
            "policy": self.policy_name,
            "block_size": self.block_size,
            "width": self.width,
            "dtype": "float32",
            "capacity_slots": self.policy.capacity_slots,
            "lease_s": self.lease_s,
            **layout,
            "model": None,
            "max_new_tokens": self.max_new_tokens,
            "max_n": None,
            "in_flight": self.held_requests(client),
        }

    def held_requests(self, client: bytes) -> list:
        """The ids of `client`'s generate requests not answered yet (a ModelServer's)."""
        return []

    def _op_create(self, client, req) -> dict:
        h = req.header
        n = P.get_int(h, "num_tokens", minimum=1)
        max_new = P.get_optional_int(h, "max_new_tokens")
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
            fits = all(self.policy.within_reservation(s, n) for s, n in zip(seq_ids, counts, strict=True))
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
        return self.stats()

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

    def _op_generate(self, client, req) -> dict | None:  # None: answered later (ModelServer)
        raise P.ProtocolError(
            P.NO_MODEL, "generate: this server serves no model (start it with --model FILE or --random-model)"
        )

    # -- a served model's hooks (generate.ModelServer) ---------------------------------------
    def has_work(self) -> bool:
        """Whether `step` would do something."""
        return False

    def step(self) -> list[tuple[bytes, list[bytes]]]:
        """(client, reply frames) of the requests one step of work finished."""
        return []

    def _drop_client(self, client: bytes) -> int:
        """A silent client's state beyond its sequences; returns how many sequences it freed."""
        return 0

    def _running_seqs(self) -> int:
        return 0

    def close(self) -> None:
        """Files the server keeps open (a ModelServer's journal)."""

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
            self.num_expired_seqs += self._drop_client(c)
        self.num_expired_seqs += len(freed)
        self._sample(now, force=True)
        return freed

    def _sample(self, now: float, force: bool) -> None:
        if force or now - self.last_sample_s >= self.sample_every_s:
            self.last_sample_s = now
            live = len(self.owner) + self._running_seqs()
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
            "engine": None,
        }
