"""Idempotency keys: a client that sends a request again (its reply lost, the server restarted) gets
the request's one answer, not a second generation.

A request carrying an `Idempotency-Key` header (the IETF draft's name, Stripe's; the `openai`
client sends it with `extra_headers`) is tracked under that key in the KV server's finished-id
table (kvcache/server/answers.py, one place for the rule):

    a key never seen          the request runs; its reply is kept (and journaled) before it is sent
    a key whose request runs  the second waits for the first's end and gets its reply; if the first
                              ended without one (its client left), the second runs it
    a key answered            the kept reply again, marked `Idempotent-Replayed: true` (a stream
                              gets it as one chunk a choice)
    a key used for another    422, naming the header: a re-send must repeat its request
    request (body differs)

With `serve --journal FILE` every kept reply is appended and flushed before it is sent, and a server
started again on the file answers what the old one finished, even a reply its crash kept from the
client; a request it had not finished is generated again from its prompt (greedy and seeded
sampling give the same tokens). Flushed, not fsynced: it survives the server process's death, not
the machine's. Requests without the header are not tracked.
"""

import asyncio
import json

from playground.core.errors import RequestError
from playground.kvcache.server import protocol as P
from playground.kvcache.server.answers import AnswerTable, Key, Seen

HEADER = "idempotency-key"
REPLAYED = "idempotent-replayed"
CLIENT = b"http"  # every HTTP client shares one key space: the keys are theirs to make unique
KEPT = 65536  # answers kept (the oldest go first; a re-send of one of those runs again)
MAX_KEY_CHARS = 255


class Idempotency:
    """The server's idempotency keys: `claim` before a request runs, `done` with its reply or `drop`
    when it ends without one."""

    def __init__(self, journal: str | None = None):
        self.table = AnswerTable(journal, per_client=KEPT)
        self.ends: dict[Key, asyncio.Future] = {}  # a running key -> its end (for re-sends waiting)

    @staticmethod
    def key(value: str | None) -> Key | None:
        """The table's key of a header value (None: not tracked); RequestError if unusable."""
        if value is None:
            return None
        if not value or len(value) > MAX_KEY_CHARS:
            raise RequestError(
                f"Idempotency-Key: 1 to {MAX_KEY_CHARS} characters, got {len(value)}",
                param="Idempotency-Key",
            )
        return CLIENT, json.dumps(value)

    async def claim(self, key: Key, asked: dict) -> dict | None:
        """The kept reply of `key` (a replay), or None once the caller owns the request; a re-send
        of a running request waits for that one's end."""
        while True:
            try:
                seen, reply = self.table.seen(key, asked)
            except P.ProtocolError:
                raise RequestError(
                    f"Idempotency-Key {json.loads(key[1])!r} was already used for another request (another "
                    "body); a re-send must repeat its request",
                    status=422,
                    code="idempotency_key_reused",
                    param="Idempotency-Key",
                ) from None
            if seen is Seen.ANSWERED:
                return reply
            if seen is Seen.NEW:
                self.table.start(key, asked)
                self.ends[key] = asyncio.get_running_loop().create_future()
                return None
            await asyncio.shield(self.ends[key])  # the first's end; then look again

    def done(self, key: Key, reply: dict) -> None:
        """The request's one reply: kept and journaled before it is sent."""
        self.table.finish(key, reply)
        self._ended(key)

    def drop(self, key: Key) -> None:
        """The request ended without a reply (its client left, the server stops): a re-send runs it."""
        self.table.running.pop(key, None)
        self._ended(key)

    def _ended(self, key: Key) -> None:
        end = self.ends.pop(key, None)
        if end is not None and not end.done():
            end.set_result(None)

    @property
    def num_replayed(self) -> int:
        return self.table.num_replayed

    def close(self) -> None:
        self.table.close()
