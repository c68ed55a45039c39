"""Ranks that called different collectives: found where their messages meet, named on both sides.

A matched collective's messages carry its salt in their tags (optags.py), so a rank that waits for
its own collective's message from `src` never takes one of another collective. What it sees instead,
parked beside the one it waits for, is src's message with another salt. Messages from one sender
arrive in order, so that message was sent before the one awaited: src is in another collective
(another op, size, dtype or collective altogether), not merely late. PyTorch's desync debug
all-gathers every collective's fingerprint before it runs to find the same thing; here it costs
nothing until a receive has to wait, and then one look at what is parked.

The rank that finds it tells src, and every other rank, what it called (an object on TAG_MISMATCH,
never salted) and waits up to MISMATCH_WAIT_S for src's answer; src, waiting too or at its next wait,
finds the note, tells everyone what it called, and both raise CollectiveMismatch naming both sides.
So does every other rank at its next wait, with the first note it finds (the launcher's abort
carries the first one's line too). A src that never waits again (it finished) cannot answer: the
error says so, and its flight ring still shows what it called.

Count and dtype are also checked where a message lands (the fingerprint's 10 bits miss one other
call in 128 that has the same op): a message of another dtype is a mismatch found the same way.
"""

import json
from typing import TYPE_CHECKING

from playground.comm.flight import dtype_name
from playground.comm.optags import TAG_MISMATCH, is_salted, salt_of
from playground.comm.transport import KIND_OBJ, Message
from playground.core.errors import CollectiveMismatch, CommTimeout, MessageMismatch, PeerLost

MISMATCH_WAIT_S = 2.0  # how long a rank that found a mismatch waits for the other side to say what it called


class DesyncCheck:
    """The Communicator's mismatch check, run by `_take` only when a receive is not satisfied at once."""

    if TYPE_CHECKING:  # the Communicator's, which this is mixed into
        rank: int
        size: int
        _pending: dict

        def _op_details(self) -> dict | None: ...

        def _post(self, dst: int, tag: int, nbytes: int, is_array: bool, post, *args): ...

        def _take(self, src: int, tag: int, op: str, timeout_s: float | None, kind: str = ..., into=...): ...

        @property
        def transport(self): ...

    _told: set[int]  # the ranks this rank has told what it called (_init_desync)
    _notes: dict[int, dict]  # what other ranks said they called
    _settling = False  # while a mismatch is being named: no check inside the exchange

    def _init_desync(self) -> None:
        self._told, self._notes = set(), {}

    def _on_arrival(self, msg: Message, src: int, wire: int) -> bool:
        """A message arrived while this rank waited for (src, wire), and it is not that one: raise if
        it shows a disagreement. True when it was a note, read here (not to be parked)."""
        if self._settling:
            return False
        if msg.tag == TAG_MISMATCH:
            self._read_note(msg)
            return True
        if msg.src == src and is_salted(wire) and is_salted(msg.tag) and salt_of(msg.tag) != salt_of(wire):
            self._mismatch(src)
        return False

    def _check_parked(self, src: int, wire: int) -> None:
        """A wait for (src, wire) begins with messages parked, or went a whole slice without it: is a
        disagreement already parked?"""
        if self._settling:
            return
        pending = self._pending
        for r in range(self.size):
            q = pending.pop((r, TAG_MISMATCH), None)
            for note in q or ():
                self._read_note(note)
        if not is_salted(wire):
            return
        mine = salt_of(wire)
        if any(s == src and q and is_salted(t) and salt_of(t) != mine for (s, t), q in list(pending.items())):
            self._mismatch(src)

    def _read_note(self, msg: Message) -> None:
        """Another rank says what it called: a mismatch if this rank, in a matched collective, called
        something else (a rank that called the same is noted and passed by)."""
        theirs = msg.obj()
        self._notes[msg.src] = theirs
        mine = self._op_details()
        if mine is not None and theirs is not None and theirs.get("fingerprint") != mine["fingerprint"]:
            self._mismatch(msg.src, theirs)

    def _mismatch(self, peer: int, theirs: dict | None = None) -> None:
        """Tell every rank what this rank called (`peer` first), learn what `peer` called (`theirs`,
        or its note, or by waiting for it), and raise CollectiveMismatch naming both."""
        self._settling = True
        try:
            mine = self._op_details()
            if mine is not None:
                mine = {**mine, "rank": self.rank, "dtype": dtype_name(mine["dtype"])}
            told = self._told
            body = json.dumps(mine).encode()
            for r in [peer, *range(self.size)]:  # the odd rank out may be asked by two neighbours
                if r != self.rank and r not in told:
                    told.add(r)
                    self._say(r, body)
            if theirs is None:
                theirs = self._notes.get(peer) or self._hear(peer)
        finally:
            self._settling = False
        raise CollectiveMismatch(self.rank, peer, mine, theirs)

    def _say(self, peer: int, body: bytes) -> None:
        """Tell `peer` what this rank called (TAG_MISMATCH, never salted)."""
        self._post(peer, TAG_MISMATCH, len(body), False, self.transport.send_obj, peer, TAG_MISMATCH, body)

    def _dtype_mismatch(self, src: int, got, want) -> None:
        """A message of another dtype than the receive's: in a matched collective, ranks that called
        it differently; otherwise a MessageMismatch saying both dtypes."""
        if self._op_details() is not None and not self._settling:
            self._mismatch(src)
        raise MessageMismatch(
            f"rank {self.rank}: expected {want} from rank {src}, got {got}",
            rank=self.rank,
            peer=src,
            direction="from",
        )

    def _hear(self, peer: int) -> dict | None:
        """What `peer` says it called, if it says so within MISMATCH_WAIT_S."""
        try:
            return self._take(peer, TAG_MISMATCH, "what rank called", MISMATCH_WAIT_S, KIND_OBJ).obj()
        except (CommTimeout, PeerLost):
            return None
