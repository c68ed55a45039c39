"""`LocalClient`: the KV-cache client's calls made straight into a server object, no socket: for
tests and profiling (one client; `collect` steps the server's engine itself)."""

import time
from collections import defaultdict

import numpy as np

from playground.core.errors import MessageMismatch
from playground.kvcache.server import protocol as P
from playground.kvcache.server.client import KVClient, RequestId
from playground.kvcache.server.kv_ops import KVServer


class LocalClient(KVClient):
    """The same calls straight into a KVServer (or ModelServer) object, no socket: for tests and
    profiling."""

    def __init__(self, server: KVServer, identity: bytes = b"local"):
        self.server, self.identity, self.address = server, identity, "local"
        self.next_id = 0
        self.latencies_us = defaultdict(list)
        self.width, self.lease_s = server.width, server.lease_s
        self.submitted: dict[RequestId, float] = {}
        self.outbox: list[dict] = []  # reply headers not collected yet

    def call(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        self.next_id += 1
        t0 = time.perf_counter_ns()
        frames = self.server.handle(self.identity, P.encode_request(op, kv, id=self.next_id, **fields))
        self.latencies_us[op].append((time.perf_counter_ns() - t0) / 1000)
        assert frames is not None, f"{op} is answered at once"
        return P.decode_reply(frames, self.width if op == "read" else None)

    def submit(self, prompt, max_new_tokens: int, request_id: str | None = None, **fields) -> RequestId:
        if request_id is None:
            self.next_id += 1
        rid: RequestId = self.next_id if request_id is None else request_id
        prompt = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        request = P.encode_request("generate", id=rid, prompt=prompt, max_new_tokens=max_new_tokens, **fields)
        frames = self.server.handle(self.identity, request)
        if frames is not None:  # answered at once (refused, or answered before): its reply
            self.outbox.append(P.decode_reply(frames)[0])
        return rid

    def collect(self, ids, on_reply=lambda header: None) -> dict[RequestId, dict]:
        """Steps the server's engine until every request in `ids` is answered (one client only)."""
        pending, out = set(ids), {}
        while pending:
            if not self.outbox:
                if not self.server.has_work():
                    raise MessageMismatch(
                        f"local client: requests {sorted(pending)} are not in the engine", op="generate"
                    )
                self.outbox += [P.decode_reply(frames)[0] for _, frames in self.server.step()]
                continue
            header = self.outbox.pop(0)
            pending.discard(header["id"])
            out[header["id"]] = header
            pending.update(on_reply(header) or ())
        return out

    def close(self) -> None:
        pass
