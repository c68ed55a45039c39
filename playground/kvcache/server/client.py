"""A KV-cache client over a ZeroMQ DEALER socket; times every call as the user sees it.

Every op but `generate` is a round trip (`call`, `check`). `generate` requests are answered when
they finish, so `submit` sends them (any number in flight) and `collect` waits for their replies,
sending `ping` while it waits so that the server keeps its lease (kv_ops.py: a silent client's
requests are dropped). `LocalClient` makes the same calls straight into a server object.

Faults it notices, each a clear error within `timeout_s`:
- a server that answers nothing, not even a ping: WaitTimeout;
- a server that restarted, or no longer holds a request and will never answer it: every ping's
  reply lists the client's requests the server holds and carries the server's instance id, so
  the requests sent before that ping and neither answered nor held are lost (ServerLost, naming
  them, and the restart when the instance id changed);
- a launched rank's run aborted by the launcher: `on_wait` (a Communicator's `check_abort`) is
  called between slices of every wait, as the communicator's own waits do, so a rank waiting for
  the server answers the abort at once; `on_timeout` makes its no-reply error (a launched rank's:
  a CommTimeout naming the server's rank and host, which the launcher reads as whom it waited for).
"""

import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import zmq

from playground.core.errors import MessageMismatch, PlaygroundError, WaitTimeout
from playground.kvcache.server import protocol as P
from playground.kvcache.server.kv_ops import KVServer

WAIT_SLICE_S = 0.1  # longest single poll: `on_wait` is called between slices


class KVServerError(PlaygroundError):
    """The server answered a request with an error reply. `code` is its error code (one of
    protocol.ERROR_CODES), `header` the whole reply; `op`, when given, is the refused request's
    op, and the message then says "<op> refused: <message>" instead of "<code>: <message>"."""

    def __init__(self, header: dict, op: str = ""):
        self.code, self.header, self.op = header.get("error"), header, op
        what = f"{op} refused" if op else header.get("error")
        super().__init__(f"{what}: {header.get('message')}")


class ServerLost(PlaygroundError):
    """Requests that will never be answered: the server restarted, or no longer holds them.
    `request_ids` are the lost requests; `restarted` says whether the server's instance changed."""

    def __init__(self, address: str, request_ids: list, before: str | None, after: str | None):
        self.address, self.request_ids = address, request_ids
        self.restarted = before is not None and before != after
        ids = ", ".join(map(str, request_ids[:8])) + (" ..." if len(request_ids) > 8 else "")
        why = (
            f"the server restarted (instance {before} -> {after})"
            if self.restarted
            else "the server no longer holds them"
        )
        super().__init__(
            f"kvcache client: generate requests {ids} to {address} are lost: {why}; no reply will come"
        )


class KVClient:
    """Round trips one at a time, generate requests any number at once; every wait has a timeout
    naming the op and the server."""

    def __init__(
        self,
        address: str,
        timeout_s: float = 10.0,
        ctx: zmq.Context | None = None,
        on_wait: Callable[[], None] | None = None,
        on_timeout: Callable[[str], PlaygroundError] | None = None,
    ):
        self.address, self.timeout_s, self.on_wait = address, timeout_s, on_wait
        self.on_timeout = on_timeout
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(address)
        self.next_id = 0
        self.latencies_us: dict[str, list[float]] = defaultdict(list)
        self.width: int | None = None
        self.lease_s: float | None = None
        self.server_id: str | None = None  # the instance id of the server last heard from
        self.submitted: dict[int, float] = {}  # generate request id -> perf_counter when sent
        self.unwanted: set = set()  # ids whose replies are dropped: pings not waited for, requests given up

    def _no_reply(self, what: str) -> PlaygroundError:
        if self.on_timeout is not None:
            return self.on_timeout(what)
        return WaitTimeout(
            f"kvcache client: no reply to {what} from {self.address} in {self.timeout_s:.1f}s",
            what=f"the reply to {what} from {self.address}",
            waited_s=self.timeout_s,
        )

    def _wait(self, timeout_s: float) -> bool:
        """Whether a reply is waiting, polling for up to `timeout_s` in slices with `on_wait`
        between them (it raises to stop waiting: a launched rank's abort)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.on_wait is not None:
                self.on_wait()
            left_s = deadline - time.monotonic()
            if self.sock.poll(max(0, int(min(left_s, WAIT_SLICE_S) * 1000))):
                return True
            if left_s <= WAIT_SLICE_S:
                return False

    def _recv(self, width: int | None = None) -> tuple[dict, np.ndarray | None]:
        """The next reply that is wanted (those in `unwanted` are dropped on the way)."""
        while True:
            frames = self.sock.recv_multipart(copy=False)
            header, out = P.decode_reply([f.buffer for f in frames], width)
            self.server_id = header.get("server", self.server_id)
            reply_id = header.get("id")
            if not _hashable(reply_id) or reply_id not in self.unwanted:
                return header, out
            self.unwanted.discard(reply_id)
            if not self.sock.poll(0):
                return {}, None

    def call(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        """(reply header, KV or None). Error replies are returned, not raised: see `check`."""
        self.next_id += 1
        t0 = time.perf_counter_ns()
        deadline = time.monotonic() + self.timeout_s
        self.sock.send_multipart(P.encode_request(op, kv, id=self.next_id, **fields), copy=False)
        header: dict = {}
        while not header:
            if not self._wait(deadline - time.monotonic()):
                raise self._no_reply(repr(op))
            header, out = self._recv(self.width if op == "read" else None)
        self.latencies_us[op].append((time.perf_counter_ns() - t0) / 1000)
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
        self.width, self.lease_s = info["width"], info.get("lease_s")
        return info

    def attend(self, seq_ids: list[int], layer: int, q: np.ndarray) -> np.ndarray:
        """Each query q[i] (heads, head_dim) over all of sequence seq_ids[i]'s tokens."""
        header, out = self.check("attend", q, seq_ids=seq_ids, layer=layer)
        assert out is not None, "an attend reply carries its output"
        return out.reshape(len(seq_ids), header["heads"], header["head_dim"])

    def submit(self, prompt, max_new_tokens: int, **fields) -> int:
        """Send a generate request (prompt: a string or token ids; fields: n, temperature, seed);
        returns its id, for `collect`."""
        self.next_id += 1
        if not isinstance(prompt, str):
            prompt = [int(t) for t in prompt]
        request = P.encode_request(
            "generate", id=self.next_id, prompt=prompt, max_new_tokens=max_new_tokens, **fields
        )
        self.sock.send_multipart(request, copy=False)
        self.submitted[self.next_id] = time.perf_counter()
        return self.next_id

    def collect(self, ids, on_reply=lambda header: None) -> dict[int, dict]:
        """The replies (headers) to the generate requests `ids`, as they come; `on_reply` is
        called with each and may return ids of requests it submitted, which are waited for too
        (a closed loop). The lease is renewed only by what this client sends, so unless it sent
        something in the last lease_s / 3 (at most timeout_s / 3) it pings, replies arriving or
        not. WaitTimeout if the server answers nothing, not even a ping, for timeout_s; ServerLost
        if a ping's reply shows that requests sent before it are lost (module docstring)."""
        pending, pings = set(ids), set()
        out: dict[int, dict] = {}
        every_s = min(self.timeout_s, self.lease_s or self.timeout_s) / 3
        heard_s = sent_s = time.monotonic()
        try:
            while pending:
                now = time.monotonic()
                if now - sent_s >= every_s:
                    self.next_id += 1
                    pings.add(self.next_id)
                    self.sock.send_multipart(P.encode_request("ping", id=self.next_id), copy=False)
                    sent_s = now
                if not self._wait(sent_s + every_s - now):
                    if time.monotonic() - heard_s > self.timeout_s:
                        raise self._no_reply(f"generate requests {sorted(pending)[:5]}")
                    continue
                before = self.server_id
                header, _ = self._recv()
                if not header:
                    continue
                heard_s = time.monotonic()
                reply_id = header.get("id")
                if reply_id in pings:
                    pings.discard(reply_id)
                    self._check_held(pending, reply_id, header, before)
                elif isinstance(reply_id, int) and reply_id in pending:
                    pending.discard(reply_id)
                    sent = self.submitted.pop(reply_id)
                    self.latencies_us["generate"].append((time.perf_counter() - sent) * 1e6)
                    out[reply_id] = header
                    more = on_reply(header) or ()
                    if more:
                        pending.update(more)
                        sent_s = time.monotonic()
                else:
                    raise MessageMismatch(
                        f"kvcache client: a reply with id {reply_id} while waiting for generate",
                        op="generate",
                    )
        except BaseException:
            self._give_up(pending)
            raise
        finally:
            self.unwanted |= pings  # their replies may still come: the next wait drops them
        return out

    def _check_held(self, pending: set, ping_id: int, header: dict, before: str | None) -> None:
        """ServerLost if requests sent before ping `ping_id` are neither answered (their replies
        came before this one: one connection keeps the order) nor held by the server."""
        held = header.get("in_flight")
        if not header.get("ok") or not isinstance(held, list):
            return  # an older server, which does not say: only the timeout can tell
        held = {h for h in held if _hashable(h)}
        lost = sorted(r for r in pending if r < ping_id and r not in held)
        if lost:
            raise ServerLost(self.address, lost, before, self.server_id)

    def _give_up(self, ids) -> None:
        """Stop waiting for `ids`: a reply that still comes is dropped, not taken for another's."""
        for r in ids:
            self.submitted.pop(r, None)
        self.unwanted |= set(ids)

    def generate(self, prompt, max_new_tokens: int, **fields) -> dict:
        """One generate request, waited for; the reply header (KVServerError if refused)."""
        reply = self.collect([self.submit(prompt, max_new_tokens, **fields)])
        header = next(iter(reply.values()))
        if not header.get("ok"):
            raise KVServerError(header, op="generate")
        return header

    def close(self) -> None:
        self.sock.close(0)
        if self._own_ctx:
            self.ctx.term()


def _hashable(value) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


class LocalClient(KVClient):
    """The same calls straight into a KVServer (or ModelServer) object, no socket: for tests and
    profiling."""

    def __init__(self, server: KVServer, identity: bytes = b"local"):
        self.server, self.identity, self.address = server, identity, "local"
        self.next_id = 0
        self.latencies_us = defaultdict(list)
        self.width, self.lease_s = server.width, server.lease_s
        self.submitted: dict[int, float] = {}
        self.outbox: list[dict] = []  # reply headers not collected yet

    def call(self, op: str, kv: np.ndarray | None = None, **fields) -> tuple[dict, np.ndarray | None]:
        self.next_id += 1
        t0 = time.perf_counter_ns()
        frames = self.server.handle(self.identity, P.encode_request(op, kv, id=self.next_id, **fields))
        self.latencies_us[op].append((time.perf_counter_ns() - t0) / 1000)
        assert frames is not None, f"{op} is answered at once"
        return P.decode_reply(frames, self.width if op == "read" else None)

    def submit(self, prompt, max_new_tokens: int, **fields) -> int:
        self.next_id += 1
        prompt = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        request = P.encode_request(
            "generate", id=self.next_id, prompt=prompt, max_new_tokens=max_new_tokens, **fields
        )
        frames = self.server.handle(self.identity, request)
        if frames is not None:  # refused at once: its error reply is the answer
            self.outbox.append(P.decode_reply(frames)[0])
        return self.next_id

    def collect(self, ids, on_reply=lambda header: None) -> dict[int, dict]:
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
