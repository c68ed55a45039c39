"""A KV-cache client over a ZeroMQ DEALER socket; times every call as the user sees it.

Every op but `generate` is a round trip (`call`, `check`). `generate` requests are answered when
they finish, so `submit` sends them (any number in flight) and `collect` waits for their replies,
sending `ping` while it waits so that the server keeps its lease (kv_ops.py: a silent client's
requests are dropped). `LocalClient` (local_client.py) makes the same calls straight into a server
object.

A server that restarts loses the requests it held. The client sees it in a ping's reply (each
lists the client's requests the server holds, and carries the server's instance id): requests sent
before that ping, neither answered nor held, are lost, and the client sends them again under the
same ids, up to `resends` times each. The socket's routing id is the client's own, stable across
reconnects, so the server knows a re-send for what it is and answers each id once (answers.py): a
request it still runs is not started twice, one it finished is answered with the same reply. A
reply that comes twice all the same (a re-send crossing the first reply) is dropped and counted.

Faults it reports, each a clear error within `timeout_s`:
- a server that answers nothing, not even a ping: WaitTimeout;
- requests lost more than `resends` times (0: at the first loss): ServerLost, naming them, and the
  restart when the instance id changed;
- a launched rank's run aborted by the launcher: `on_wait` (a Communicator's `check_abort`) is
  called between slices of every wait, as the communicator's own waits do, so a rank waiting for
  the server answers the abort at once; `on_timeout` makes its no-reply error (a launched rank's:
  a CommTimeout naming the server's rank and host, which the launcher reads as whom it waited for).
"""

import time
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable

import numpy as np
import zmq

from playground.core.errors import MessageMismatch, PlaygroundError, UsageError, WaitTimeout
from playground.kvcache.server import protocol as P

WAIT_SLICE_S = 0.1  # longest single poll: `on_wait` is called between slices
PING_EVERY_S = 1.0  # while it waits for generate replies, a client pings at least this often
RESENDS = 3  # times a lost request is sent again before it is reported lost
REMEMBERED = 4096  # answered ids remembered, so that a second reply to one is dropped
RequestId = int | str


class KVServerError(PlaygroundError):
    """The server answered a request with an error reply. `code` is its error code (one of
    protocol.ERROR_CODES), `header` the whole reply; `op`, when given, is the refused request's
    op, and the message then says "<op> refused: <message>" instead of "<code>: <message>"."""

    def __init__(self, header: dict, op: str = ""):
        self.code, self.header, self.op = header.get("error"), header, op
        what = f"{op} refused" if op else header.get("error")
        super().__init__(f"{what}: {header.get('message')}")


class ServerLost(PlaygroundError):
    """Requests that will never be answered: the server restarted, or no longer holds them, and
    they were sent again `resent` times already. `request_ids` are the lost requests; `restarted`
    says whether the server's instance changed."""

    def __init__(
        self, address: str, request_ids: list, before: str | None, after: str | None, resent: int = 0
    ):
        self.address, self.request_ids, self.resent = address, request_ids, resent
        self.restarted = before is not None and before != after
        ids = ", ".join(map(str, request_ids[:8])) + (" ..." if len(request_ids) > 8 else "")
        why = (
            f"the server restarted (instance {before} -> {after})"
            if self.restarted
            else "the server no longer holds them"
        )
        again = f" (and sent again {resent} times)" if resent else ""
        super().__init__(
            f"kvcache client: generate requests {ids} to {address} are lost{again}: {why}; no reply will come"
        )


class KVClient:
    """Round trips one at a time, generate requests any number at once; every wait has a timeout
    naming the op and the server. `identity` is the socket's routing id (default: a new random
    one); `resends` how often a request lost to a server restart is sent again."""

    def __init__(
        self,
        address: str,
        timeout_s: float = 10.0,
        ctx: zmq.Context | None = None,
        on_wait: Callable[[], None] | None = None,
        on_timeout: Callable[[str], PlaygroundError] | None = None,
        *,
        resends: int = RESENDS,
        identity: bytes | None = None,
    ):
        self.address, self.timeout_s, self.on_wait = address, timeout_s, on_wait
        self.on_timeout, self.resends = on_timeout, resends
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.identity = identity or b"kv-" + uuid.uuid4().hex.encode()
        self.sock.setsockopt(zmq.ROUTING_ID, self.identity)  # the same after a reconnect
        self.sock.connect(address)
        self.next_id = 0
        self.latencies_us: dict[str, list[float]] = defaultdict(list)
        self.width: int | None = None
        self.lease_s: float | None = None
        self.server_id: str | None = None  # the instance id of the server last heard from
        self.submitted: dict[RequestId, float] = {}  # generate request id -> perf_counter when sent
        self.unwanted: set = set()  # ids whose replies are dropped: pings not waited for, requests given up
        self.requests: dict[RequestId, list[bytes]] = {}  # generate requests not answered: their frames
        self.sent_at: dict[RequestId, int] = {}  # request or ping id -> the number of its last send
        self.num_sends = 0  # messages sent, in order: what a ping's reply covers
        self.resent: dict[RequestId, int] = defaultdict(int)  # request id in flight -> times sent again
        self.num_resent = 0  # requests sent again, in all
        self.answered: OrderedDict[RequestId, None] = OrderedDict()  # the newest REMEMBERED answered ids
        self.num_duplicates = 0  # replies to a request already answered, dropped

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

    def _send(self, key: RequestId, frames: list[bytes]) -> None:
        """Send a request or ping, noting which send it was."""
        self.sock.send_multipart(frames, copy=False)
        self.num_sends += 1
        self.sent_at[key] = self.num_sends

    def submit(self, prompt, max_new_tokens: int, request_id: str | None = None, **fields) -> RequestId:
        """Send a generate request (prompt: a string or token ids; fields: n, temperature, seed);
        returns its id, for `collect`: `request_id` if given (a name the caller keeps, e.g. the
        same for the same request after the caller itself restarted), else the next number."""
        if request_id is None:
            self.next_id += 1
        rid: RequestId = self.next_id if request_id is None else request_id
        if rid in self.requests:
            raise UsageError(f"request id {rid!r} is in flight already", field="request_id")
        if not isinstance(prompt, str):
            prompt = [int(t) for t in prompt]
        request = P.encode_request("generate", id=rid, prompt=prompt, max_new_tokens=max_new_tokens, **fields)
        self.requests[rid] = request
        self._send(rid, request)
        self.submitted[rid] = time.perf_counter()
        return rid

    def collect(self, ids, on_reply=lambda header: None) -> dict[RequestId, dict]:
        """The replies (headers) to the generate requests `ids`, as they come; `on_reply` is
        called with each and may return ids of requests it submitted, which are waited for too
        (a closed loop). The lease is renewed only by what this client sends, so unless it sent
        something in the last lease_s / 3 (at most timeout_s / 3, PING_EVERY_S) it pings, replies
        arriving or not. WaitTimeout if the server answers nothing, not even a ping, for
        timeout_s; requests a ping's reply shows lost are sent again, and ServerLost once one is
        lost more than `resends` times (module docstring)."""
        pending, pings = set(ids), set()
        out: dict[RequestId, dict] = {}
        every_s = min(self.timeout_s, self.lease_s or self.timeout_s, 3 * PING_EVERY_S) / 3
        heard_s = sent_s = time.monotonic()
        try:
            while pending:
                now = time.monotonic()
                if now - sent_s >= every_s:
                    self.next_id += 1
                    pings.add(self.next_id)
                    self._send(self.next_id, P.encode_request("ping", id=self.next_id))
                    sent_s = now
                if not self._wait(sent_s + every_s - now):
                    if time.monotonic() - heard_s > self.timeout_s:
                        raise self._no_reply(f"generate requests {sorted(pending, key=str)[:5]}")
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
                elif isinstance(reply_id, int | str) and reply_id in pending:
                    pending.discard(reply_id)
                    self._answered(reply_id)
                    out[reply_id] = header
                    more = on_reply(header) or ()
                    if more:
                        pending.update(more)
                        sent_s = time.monotonic()
                elif _hashable(reply_id) and reply_id in self.answered:
                    self.num_duplicates += 1  # a re-send's reply crossing the first one
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
            for p in pings:
                self.sent_at.pop(p, None)
        return out

    def _answered(self, reply_id: RequestId) -> None:
        sent = self.submitted.pop(reply_id)
        self.latencies_us["generate"].append((time.perf_counter() - sent) * 1e6)
        self.requests.pop(reply_id, None)
        self.sent_at.pop(reply_id, None)
        self.resent.pop(reply_id, None)
        self.answered[reply_id] = None
        if len(self.answered) > REMEMBERED:
            self.answered.popitem(last=False)

    def _check_held(self, pending: set, ping_id: int, header: dict, before: str | None) -> None:
        """Requests sent before ping `ping_id` and neither answered (their replies came before this
        one: one connection keeps the order) nor held by the server are lost: sent again, or
        ServerLost for those already sent again `resends` times."""
        held = header.get("in_flight")
        ping_sent = self.sent_at.pop(ping_id, None)
        if not header.get("ok") or not isinstance(held, list) or ping_sent is None:
            return  # an older server, which does not say: only the timeout can tell
        held = {h for h in held if _hashable(h)}
        lost = sorted(
            (r for r in pending if self.sent_at.get(r, ping_sent) < ping_sent and r not in held), key=str
        )
        over = [r for r in lost if self.resent[r] >= self.resends]
        if over:
            raise ServerLost(self.address, over, before, self.server_id, self.resends)
        for r in lost:
            self.resent[r] += 1
            self.num_resent += 1
            self._send(r, self.requests[r])

    def _give_up(self, ids) -> None:
        """Stop waiting for `ids`: a reply that still comes is dropped, not taken for another's."""
        for r in ids:
            self.submitted.pop(r, None)
            self.requests.pop(r, None)
            self.sent_at.pop(r, None)
            self.resent.pop(r, None)
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
