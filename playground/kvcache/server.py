"""The KV-cache server: a pool of token slots that really holds KV data, an allocation policy
deciding where each sequence's tokens live, and a thin ZeroMQ ROUTER loop in front.

`Server.handle(client, frames) -> reply frames` does all the work and touches no socket, so
tests drive it directly with several client identities. `serve()` is the loop: poll with a
timeout, handle, reply, expire leases. Standalone:
    python -m playground.kvcache.server --bind tcp://127.0.0.1:5555 --policy paged

Lease rule (a client that vanishes must not leak blocks): every request from a client identity
renews its lease; a client silent for longer than `lease_s` loses it, and every sequence it
created or forked is freed. A live client that is idle sends `ping`.
"""

import argparse
import time

import numpy as np
import zmq

from playground.kvcache import protocol as P
from playground.kvcache.policies import POLICIES, make_policy

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
    ):
        self.policy_name = policy
        self.policy = make_policy(
            policy, capacity_tokens, block_size, enable_prefix_caching, max_new_tokens, growth
        )
        self.block_size, self.width, self.lease_s = block_size, width, lease_s
        self.kv = np.zeros((self.policy.capacity_slots, width), dtype=P.KV_DTYPE)
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
        return f"Server({self.policy_name}, {len(self.owner)} seqs, {self.policy.capacity_slots} slots)"

    # -- the request handler ---------------------------------------------------------------
    def handle(self, client: bytes, frames: list) -> list[bytes]:
        now = self.clock()
        self.last_seen[client] = now
        self.num_ops += 1
        req_id = None
        try:
            req = P.decode_request(frames)
            req_id = req.header.get("id")
            reply = getattr(self, f"_op_{req.op}")(client, req)
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
        if not self.policy.has(seq_id):
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
        return {
            "policy": self.policy_name,
            "block_size": self.block_size,
            "width": self.width,
            "dtype": "float32",
            "capacity_slots": self.policy.capacity_slots,
            "lease_s": self.lease_s,
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
        seq_id = self.next_seq_id
        self.next_seq_id += 1
        num_cached = self.policy.allocate(seq_id, n, tokens, max_new)
        self.kv[self.policy.slots(seq_id, num_cached, n)] = kv[num_cached:]
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
            if not self.policy.has(s):
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
        for c in copies:  # in planning order: each source is read before a later copy reuses it
            self.kv[c.dst_slot : c.dst_slot + c.num_slots] = self.kv[c.src_slot : c.src_slot + c.num_slots]
        slots, lengths = [], []
        for s, n, old in zip(seq_ids, counts, old_lengths, strict=True):
            slots += self.policy.slot_list(s, old, old + n)
            lengths.append(old + n)
        self.kv[slots] = kv  # one scatter for the whole batch
        return {"lengths": lengths, "free_slots": self._free_slots()}

    def _op_fork(self, client, req) -> dict:
        seq_id = self._seq(req.header)
        k = P.get_int(req.header, "num_children", minimum=1)
        if not self.policy.can_fork(seq_id, k):
            raise self._oom("fork", f"{k} copies of sequence {seq_id}", True)
        child_ids = list(range(self.next_seq_id, self.next_seq_id + k))
        self.next_seq_id += k
        for c in self.policy.fork(seq_id, child_ids):
            self.kv[c.dst_slot : c.dst_slot + c.num_slots] = self.kv[c.src_slot : c.src_slot + c.num_slots]
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
            "_kv": self.kv[self.policy.slots(seq_id)],
        }

    def _op_free(self, client, req) -> dict:
        seq_ids = P.get_int_list(req.header, "seq_ids")
        for s in seq_ids:  # check all first: a refused free changes nothing
            if not self.policy.has(s):
                raise P.ProtocolError(P.UNKNOWN_SEQUENCE, f"free: no sequence {s}")
        for s in seq_ids:
            self.policy.free(s)
            del self.owner[s]
        self.num_freed_seqs += len(seq_ids)
        return {"freed": len(seq_ids), "free_slots": self._free_slots()}

    def _op_stats(self, client, req) -> dict:
        return self.stats()

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
        self.num_expired_seqs += len(freed)
        self._sample(now, force=True)
        return freed

    def _sample(self, now: float, force: bool) -> None:
        if force or now - self.last_sample_s >= self.sample_every_s:
            self.last_sample_s = now
            self.samples.append((now - self.start_s, len(self.owner), *self.policy.usage()))

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
        }


def serve(server: Server, sock: zmq.Socket, stop=lambda: False, poll_ms: int = 50) -> None:
    """Answer requests on a ROUTER socket until stop() is true; never blocks longer than poll_ms."""
    while not stop():
        if sock.poll(poll_ms):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                identity, body = frames[0].bytes, frames[1:]
                envelope = []
                if body and len(body[0]) == 0:  # a REQ client's delimiter: keep it for the reply
                    envelope, body = [b""], body[1:]
                try:
                    reply = server.handle(identity, [f.buffer for f in body])
                except Exception as e:  # a bug must not take the server down for every other client
                    server.errors[P.INTERNAL_ERROR] = server.errors.get(P.INTERNAL_ERROR, 0) + 1
                    reply = P.error_reply(None, P.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
                sock.send_multipart([identity, *envelope, *reply], copy=False)
        server.expire_leases()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m playground.kvcache.server", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bind", default="tcp://127.0.0.1:5555", help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:*")
    ap.add_argument("--policy", default="paged", choices=list(POLICIES))
    ap.add_argument("--capacity-tokens", type=int, default=200_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--width", type=int, default=8, help="KV floats per token")
    ap.add_argument("--lease-s", type=float, default=30.0)
    ap.add_argument("--prefix-caching", action="store_true")
    args = ap.parse_args(argv)
    server = Server(
        args.policy, args.capacity_tokens, args.block_size, args.width, args.lease_s, args.prefix_caching
    )
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
