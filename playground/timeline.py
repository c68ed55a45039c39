"""One timeline from every rank's log: clocks aligned, each message drawn from its send to its receive.

Each rank logs raw timestamps from its own time source and, once, a `clock` event (cat "meta")
with its offset to rank 0's clock and the offset's uncertainty (playground.clocks). `align` shifts
every event of a rank by its offset, so a multi-host timeline lines up to within the ranks'
uncertainties; a log without a clock event (an older run, the simulator) is left as it is.

Messages from one sender to one receiver on one tag are delivered in order, and the communicator
numbers them (`seq` on `send` and `recv_wait`), so the k-th send from r to s on tag t *is* the k-th
receive at s from r on tag t. `message_flows` pairs them; a send never received has no arrow.
"""

import hashlib
from dataclasses import dataclass

from playground.trace import CAT_META

Key = tuple[int, int, int, int]  # (src, dst, tag, seq)


@dataclass(frozen=True)
class RankClock:
    offset_us: float
    uncertainty_us: float


@dataclass(frozen=True)
class Flow:
    """One message: its `send` event on rank src and its `recv_wait` event on rank dst."""

    src: int
    dst: int
    tag: int
    seq: int
    send: dict
    recv: dict

    @property
    def id(self) -> str:
        """A Chrome trace flow id (hex, as Perfetto parses string ids): a hash of (src, dst, tag, seq)."""
        text = f"{self.src},{self.dst},{self.tag},{self.seq}".encode()
        return "0x" + hashlib.blake2b(text, digest_size=7).hexdigest()

    @property
    def slack_us(self) -> float:
        """Time from the send's start to the receive's end: negative means the receive completed
        before the message was sent, which only misaligned clocks can show."""
        return self.recv["ts"] + self.recv["dur"] - self.send["ts"]


def clock_of(events: list[dict]) -> RankClock | None:
    """The rank's clock estimate from its `clock` event, if it logged one."""
    for e in events:
        if e.get("name") == "clock" and e.get("cat") == CAT_META:
            args = e.get("args", {})
            return RankClock(float(args.get("offset_us", 0.0)), float(args.get("uncertainty_us", 0.0)))
    return None


def align(events_by_rank: dict[int, list[dict]]) -> tuple[dict[int, list[dict]], dict[int, RankClock]]:
    """(events shifted onto rank 0's clock, each rank's clock estimate); meta events are dropped
    from the timeline (they are facts about the rank, not time it spent)."""
    aligned, found = {}, {}
    for rank, events in events_by_rank.items():
        clock = clock_of(events)
        shift = clock.offset_us if clock is not None else 0.0
        if clock is not None:
            found[rank] = clock
        aligned[rank] = [
            {**e, "ts": round(e["ts"] + shift, 3)} if shift else e for e in events if e.get("cat") != CAT_META
        ]
    return aligned, found


def message_flows(events_by_rank: dict[int, list[dict]]) -> list[Flow]:
    """Every message whose send and receive are both in the logs, in send order per rank."""
    sends: dict[Key, dict] = {}
    recvs: dict[Key, dict] = {}
    for rank, events in events_by_rank.items():
        for e in events:
            args = e.get("args")
            if not args or "seq" not in args:
                continue
            if e["name"] == "send":
                sends[(rank, args["peer"], args["tag"], args["seq"])] = e
            elif e["name"] == "recv_wait":
                recvs[(args["peer"], rank, args["tag"], args["seq"])] = e
    return [Flow(*key, send, recvs[key]) for key, send in sends.items() if key in recvs]


def receives_before_send(flows: list[Flow]) -> list[Flow]:
    """Messages the (aligned) timeline shows as received before they were sent."""
    return [f for f in flows if f.slack_us < 0]
