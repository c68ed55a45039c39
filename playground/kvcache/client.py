"""A KV-cache client over a ZeroMQ DEALER socket; times every call as the user sees it."""

import time
from collections import defaultdict

import numpy as np
import zmq

from playground.errors import MessageMismatch, PlaygroundError, WaitTimeout
from playground.kvcache import protocol as P


class KVServerError(PlaygroundError):
    """The server answered a request with an error reply. `code` is its error code (one of
    protocol.ERROR_CODES), `header` the whole reply; `op`, when given, is the refused request's
    op, and the message then says "<op> refused: <message>" instead of "<code>: <message>"."""

    def __init__(self, header: dict, op: str = ""):
        self.code, self.header, self.op = header.get("error"), header, op
        what = f"{op} refused" if op else header.get("error")
        super().__init__(f"{what}: {header.get('message')}")


class KVClient:
    """One request in flight at a time; every wait has a timeout naming the op and the server."""

    def __init__(self, address: str, timeout_s: float = 10.0, ctx: zmq.Context | None = None):
        self.address, self.timeout_s = address, timeout_s
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(address)
        self.next_id = 0
        self.latencies_us: dict[str, list[float]] = defaultdict(list)
        self.width: int | None = None

    def call(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        """(reply header, KV or None). Error replies are returned, not raised: see `check`."""
        self.next_id += 1
        t0 = time.perf_counter_ns()
        self.sock.send_multipart(P.encode_request(op, kv, id=self.next_id, **fields), copy=False)
        if not self.sock.poll(int(self.timeout_s * 1000)):
            raise WaitTimeout(
                f"kvcache client: no reply to {op!r} from {self.address} in {self.timeout_s:.1f}s",
                what=f"the reply to {op!r} from {self.address}",
                waited_s=self.timeout_s,
            )
        frames = self.sock.recv_multipart(copy=False)
        self.latencies_us[op].append((time.perf_counter_ns() - t0) / 1000)
        header, out = P.decode_reply([f.buffer for f in frames], self.width)
        if header.get("id") != self.next_id:
            raise MessageMismatch(
                f"kvcache client: reply id {header.get('id')} for request {self.next_id} ({op})", op=op
            )
        return header, out

    def check(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        header, out = self.call(op, kv, **fields)
        if not header.get("ok"):
            raise KVServerError(header)
        return header, out

    def ping(self) -> dict:
        info, _ = self.check("ping")
        self.width = info["width"]
        return info

    def close(self) -> None:
        self.sock.close(0)
        if self._own_ctx:
            self.ctx.term()


class LocalClient(KVClient):
    """The same calls straight into a Server object, no socket: for tests and profiling."""

    def __init__(self, server, identity: bytes = b"local"):
        self.server, self.identity, self.address = server, identity, "local"
        self.next_id = 0
        self.latencies_us = defaultdict(list)
        self.width = server.width

    def call(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        self.next_id += 1
        t0 = time.perf_counter_ns()
        frames = self.server.handle(self.identity, P.encode_request(op, kv, id=self.next_id, **fields))
        self.latencies_us[op].append((time.perf_counter_ns() - t0) / 1000)
        return P.decode_reply(frames, self.width)

    def close(self) -> None:
        pass
