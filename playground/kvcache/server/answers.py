"""The finished-id table: a server answers each `generate` request id once (docs/protocols.md).

A request is named by (client, id): the client's ZeroMQ routing id (KVClient sets a stable one, so
it is the same after a reconnect or a server restart) and the `id` of its header. When an accepted
request ends, its reply (the completion, or the error it ended in) goes into the table before it
is sent; a request re-sent under an id the table holds gets that reply again (marked `replayed`),
not a second generation; one re-sent while it still runs gets nothing new (its one reply comes
when it finishes). An id used again for another request (another prompt or sampling) is refused.
A request without an id, or with one that is not a JSON scalar, is not deduplicated.

With a journal (a file), every answer is appended and flushed before its reply is sent, and a
server started on the same journal begins with the table the old one had: a request that finished
just before a crash, whose reply never reached its client, is answered from the journal when it is
re-sent. Flushed, not fsynced: it survives the server process's death (SIGKILL), not the machine's.
A torn last line (the writer killed mid-line) is skipped.

Kept: the newest `per_client` answers of each client, until the client's lease expires (a client
silent that long is forgotten, its requests dropped; a re-send after that is a new request). A
re-send of an answer pushed out by `per_client` newer ones runs again: greedy and seeded sampling
give the same tokens, at the cost of the compute.
"""

import hashlib
import json
import os
from collections import OrderedDict
from enum import Enum, auto
from pathlib import Path
from typing import TextIO

from playground.core.errors import UsageError
from playground.kvcache.server import protocol as P

PER_CLIENT = 1024  # answers kept per client
Key = tuple[bytes, str]  # (client, the id as JSON)


class Seen(Enum):
    NEW = auto()  # never seen (or forgotten): run it
    RUNNING = auto()  # accepted and not finished: its reply comes when it does
    ANSWERED = auto()  # finished: its reply is in the table


def request_key(client: bytes, req_id) -> Key | None:
    """The table's key of a request, or None for an id that is not deduplicated."""
    if isinstance(req_id, str | int | float | bool) and req_id == req_id:  # NaN: no
        return client, json.dumps(req_id)
    return None


def fingerprint(header: dict) -> str:
    """What a request asks, its id left out: a re-send must ask the same."""
    asked = {k: v for k, v in header.items() if k != "id"}
    return hashlib.blake2b(json.dumps(asked, sort_keys=True).encode(), digest_size=8).hexdigest()


class AnswerTable:
    def __init__(self, journal: str | Path | None = None, per_client: int = PER_CLIENT):
        self.per_client = per_client
        self.running: dict[Key, str] = {}  # key -> fingerprint
        self.answers: dict[bytes, OrderedDict[str, tuple[str, dict]]] = {}  # client -> id -> (fp, reply)
        self.num_replayed = 0  # re-sends answered from the table
        self.num_attached = 0  # re-sends of a request still running
        self.num_loaded = 0  # completions (ok answers) read from the journal at start
        self.path = Path(journal) if journal is not None else None
        self._file: TextIO | None = None
        self._lines = 0  # lines in the journal file
        if self.path is not None:
            try:
                self._load()
            except OSError as e:
                raise UsageError(
                    f"cannot keep the answers journal {self.path}: {e.strerror or e}", field="journal"
                ) from None

    def __repr__(self):
        journal = f", journal {self.path}" if self.path else ""
        return f"AnswerTable({len(self.running)} running, {self.num_answers} answered{journal})"

    @property
    def num_answers(self) -> int:
        return sum(len(a) for a in self.answers.values())

    def clients(self) -> list[bytes]:
        return list(self.answers)

    def seen(self, key: Key, header: dict) -> tuple[Seen, dict | None]:
        """Whether the request `header` under `key` is new, running or answered (with its reply);
        ProtocolError (bad_request) if the id was used for another request."""
        fp = fingerprint(header)
        if key in self.running:
            self._same(key, fp, self.running[key])
            self.num_attached += 1
            return Seen.RUNNING, None
        mine = self.answers.get(key[0])
        found = mine.get(key[1]) if mine is not None else None
        if found is None:
            return Seen.NEW, None
        self._same(key, fp, found[0])
        self.num_replayed += 1
        return Seen.ANSWERED, found[1]

    @staticmethod
    def _same(key: Key, fp: str, was: str) -> None:
        if fp != was:
            raise P.ProtocolError(
                P.BAD_REQUEST,
                f"generate: id {key[1]} was already used by this client for another request "
                "(another prompt or sampling); a re-send must repeat its request",
                json.loads(key[1]),
            )

    def start(self, key: Key, header: dict) -> None:
        self.running[key] = fingerprint(header)

    def finish(self, key: Key, reply: dict) -> None:
        """The request's one answer: kept (and journaled, flushed) before its reply is sent."""
        fp = self.running.pop(key, None)
        if fp is None:
            return  # not a tracked request (no id, or its client was forgotten meanwhile)
        self._keep(key, fp, reply)
        if self.path is not None:
            self._append({"client": key[0].hex(), "id": key[1], "fingerprint": fp, "reply": reply})

    def _keep(self, key: Key, fp: str, reply: dict) -> None:
        mine = self.answers.setdefault(key[0], OrderedDict())
        mine[key[1]] = (fp, reply)
        mine.move_to_end(key[1])
        while len(mine) > self.per_client:
            mine.popitem(last=False)

    def forget(self, client: bytes) -> None:
        """A client whose lease expired: its answers and running requests are dropped."""
        self.answers.pop(client, None)
        self.running = {k: fp for k, fp in self.running.items() if k[0] != client}

    # -- the journal ---------------------------------------------------------------------------
    def _load(self) -> None:
        """The answers of the journal, newest kept; then the journal rewritten with only those
        (a temporary file renamed over it), so it does not grow across restarts."""
        assert self.path is not None
        if self.path.exists():
            for line in self.path.read_bytes().splitlines():
                try:
                    entry = json.loads(line)
                    key = (bytes.fromhex(entry["client"]), entry["id"])
                    self._keep(key, entry["fingerprint"], entry["reply"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line, or not ours
            self.num_loaded = sum(
                1 for mine in self.answers.values() for _, r in mine.values() if r.get("ok")
            )
        self._compact()

    def _compact(self) -> None:
        assert self.path is not None
        if self._file is not None:
            self._file.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            for client, mine in self.answers.items():
                for req_id, (fp, reply) in mine.items():
                    entry = {"client": client.hex(), "id": req_id, "fingerprint": fp, "reply": reply}
                    f.write(json.dumps(entry, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._lines = self.num_answers
        self._file = open(self.path, "a")  # noqa: SIM115 - kept open, closed by close()

    def _append(self, entry: dict) -> None:
        assert self._file is not None
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._file.flush()
        self._lines += 1
        if self._lines > 2 * self.num_answers + 1024:  # mostly answers pushed out: rewrite
            self._compact()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
