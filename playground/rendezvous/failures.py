"""Failure detection and blame: which ranks failed, how, and which failure is the root cause.

The first failure is the root cause; failures that are consequences of it (PeerLost) are marked
secondary. The first failure also aborts the run: every other rank is told why, and has
ABORT_GRACE_S to report and exit. A rank that does neither is silent, and is blamed once the abort
has settled, with its stack when this host can ask it for one (SIGUSR1, `dump_stack`).

A silent rank is the root cause only when every primary failure is a rank that timed out waiting
(CommTimeout), perhaps for it. A rank that raised, died, was lost or could not register explains the
run by itself: a rank still silent after that is merely slow to answer the abort (a busy host), so
it gets the whole grace and is then recorded after the root cause, never before it. Among silent
ranks, one whose process is gone (it died without a word) comes first, then one its peers waited for.

`Launcher` forks the ranks and watches their exit sentinels (`watch_exits=True`): a rank is gone
when its process is, and it may be signalled. Under another launcher (`playground.launcher.external`)
a rank counts as gone once it has said its last word, and only a playground process on this host
may be signalled (dumped, or killed once blamed: nobody else would stop it, as under a shell loop).

With emulated hosts a rank that has not beaten for `heartbeat_lost_s` is declared lost
(`check_heartbeats`), so a cut host link (which kills nothing) is noticed within HEARTBEAT_LOST_S
and a poll of the coordinator's loop, not after the 30 s receive timeout.

A rank on this host whose process is stopped (SIGSTOP, Ctrl-Z, a debugger holding it: state T or t
in /proc) for STOPPED_S is declared stopped (`check_stopped`): it can neither work nor answer, and
its peers would otherwise wait the whole receive timeout. A process that merely computes, however
long, is running or sleeping, never stopped, so a long step is no false alarm; a brief stop (a
profiler's sample) is shorter than STOPPED_S.
"""

import json
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from playground.comm import flight, flight_report
from playground.core.errors import CommTimeout, ScenarioMismatch

ABORT_GRACE_S = 2.0  # after an abort, how long ranks get to report and exit before SIGKILL
STACK_WAIT_S = 0.5  # how long a hung rank gets to dump its stack on SIGUSR1
STACK_POLL_S = 0.02
SETTLE_S = 0.3  # after an abort, how long to wait for slower ranks to report before blaming silent ones
HEARTBEAT_LOST_S = 1.5  # a rank not heard from for this long is lost (it beats every 0.25 s: 6 beats missed)
STOPPED_S = 1.0  # a rank whose process stays stopped this long is failed
FAILURES_LOG = "failures.jsonl"  # each failure as it is recorded (FailureDetection._note)
STATE_POLL_S = 0.1  # how often the ranks' process states are read
_STOPPED = {  # /proc/<pid>/stat state -> why the process cannot run
    "T": "stopped (SIGSTOP or Ctrl-Z: process state T)",
    "t": "stopped by a debugger (tracing stop: process state t)",
}


@dataclass
class RankFailure:
    rank: int
    at_s: float
    kind: str  # "error", "signal", "exit", "hang", "register", "lost", "stopped"
    message: str
    traceback: str = ""
    pid: int | None = None
    host: str = ""
    secondary: bool = False  # a consequence of another rank's failure (PeerLost)
    stack: str = ""
    waiting_for: int | None = None  # the peer a timed-out rank was waiting for
    error_type: str = ""  # the exception's class name, for kind "error"

    def headline(self) -> str:
        where = f" (pid {self.pid}{' on ' + self.host if self.host else ''})" if self.pid else ""
        return f"rank {self.rank}{where} at {self.at_s:.2f}s: {self.message}"

    @property
    def is_waiting(self) -> bool:
        """A rank that timed out waiting: a peer that never answered may be the cause."""
        return self.error_type == CommTimeout.__name__ or self.waiting_for is not None


@dataclass
class LaunchOutcome:
    results: list[dict | None]
    failures: list[RankFailure] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False
    events: list[dict] = field(default_factory=list)  # drills: what was done to a rank or the cluster, when
    t0_monotonic_s: float = 0.0  # the coordinator's start on this host's CLOCK_MONOTONIC: at_s counts from it
    restarts: list[dict] = field(
        default_factory=list
    )  # the group's restarts before this outcome (supervise.py)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.interrupted and all(r is not None for r in self.results)

    @property
    def root_cause(self) -> RankFailure | None:
        primary = [f for f in self.failures if not f.secondary] or self.failures
        return primary[0] if primary else None


def is_explained(failures: list[RankFailure]) -> bool:
    """Whether a recorded primary failure explains the run by itself (not a wait for a peer), so that
    no silent rank can be its root cause."""
    return any(not f.secondary and not f.is_waiting for f in failures)


def link_waits_first(
    failures: list[RankFailure], hosts: dict[int, str], host_notes: dict[str, str]
) -> list[RankFailure]:
    """The failures with, when every primary one is a wait (nobody raised, died or hung: a slow link
    looks like this), the wait most likely caused by a link first: one across a host something was
    done to (a drill: `host_notes`), then one across hosts at all; else in the order they came. A
    rank waiting for a peer on its own host waits for one that waits across a link, not on a link."""
    if is_explained(failures) or len(set(hosts.values())) < 2:
        return failures

    def key(item: tuple[int, RankFailure]) -> tuple[int, int]:
        i, f = item
        ends = {hosts.get(f.rank), hosts.get(f.waiting_for)} if f.waiting_for is not None else set()
        if f.secondary or len(ends) < 2:
            return (2, i)
        return (0 if ends & set(host_notes) else 1, i)

    return [f for _, f in sorted(enumerate(failures), key=key)]


def blame_order(silent: set[int], failures: list[RankFailure], gone: set[int]) -> list[int]:
    """The silent ranks, most likely cause first: the dead, then those their peers waited for."""
    waited_on = {f.waiting_for for f in failures if f.waiting_for is not None}
    return sorted(silent, key=lambda r: (r not in gone, r not in waited_on, r))


class FailureDetection:
    """The coordinator's failure side (mixed into `Coordinator`, whose state it shares): errors the
    ranks report, ranks lost or silent, and the order that puts the root cause first."""

    # The Coordinator's registration state, read here.
    n: int
    pids: dict[int, int]
    hosts: dict[int, str]
    identities: dict[int, bytes]
    reported: set[int]  # ranks that sent done or error
    exited: set[int]  # ranks that are gone (process exit, or last word said)
    last_beat: dict[int, float]
    started_at: float | None

    def __init__(self, run_dir: Path, watch_exits: bool, heartbeat_lost_s: float | None):
        self.run_dir = run_dir  # where ranks write their stack dumps
        self.watch_exits = watch_exits
        self.heartbeat_lost_s = heartbeat_lost_s
        self.t0 = time.monotonic()
        self.failures: list[RankFailure] = []
        self.abort_deadline: float | None = None
        self.abort_message: dict | None = None  # what every rank was told, once the run was aborted
        self.last_told = 0.0  # when the abort last went out (to a rank that registered late)
        self.lost: set[int] = set()  # declared lost: silent for heartbeat_lost_s
        self.host_notes: dict[str, str] = {}  # host -> what was done to it, quoted in failures
        self.events: list[dict] = []  # what was done to the emulated cluster, for result.json
        self.stopped_since: dict[int, float] = {}  # rank -> when its process was first seen stopped
        self.next_state_poll = 0.0
        self.local: dict[int, bool] = {}  # rank -> whether its process is ours to read and signal

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def record(self, what: str, host: str = "") -> None:
        """Something done to the cluster (a drill): kept for result.json and quoted in the host's failures."""
        at_s = self.elapsed_s()
        self.events.append({"at_s": round(at_s, 3), "host": host, "event": what})
        if host:
            self.host_notes[host] = f"{what} at {at_s:.2f}s"

    def fail(self, failure: RankFailure, abort: dict | None = None) -> None:
        """Record a failure; the first one also tells every other live rank to abort (every rank,
        the failed one included, when `abort` gives the message's fields)."""
        self.failures.append(failure)
        self._note(failure)
        if self.abort_deadline is None:
            self.abort_deadline = time.monotonic() + ABORT_GRACE_S
            several = len(set(self.hosts.values())) > 1
            who = f"rank {failure.rank}" + (f" on host {failure.host}" if failure.host and several else "")
            reason = f"{who} failed: {failure.message.splitlines()[0] if failure.message else failure.kind}"
            message = self.abort_message = {"type": "abort", "reason": reason, **(abort or {})}
            if getattr(self, "live", False):  # a live recovery's survivors renumber around the lost rank
                message["lost"] = [failure.rank]
            for r, ident in self.identities.items():
                if (r != failure.rank or abort is not None) and r not in self.exited:
                    self._send(ident, message)

    def _note(self, failure: RankFailure) -> None:
        """The failure, one JSON line appended to failures.jsonl in the run directory the moment it
        is known (result.json comes only when the run is over): a live view reads it."""
        line = {"headline": failure.headline(), "secondary": failure.secondary, "kind": failure.kind}
        try:
            with open(Path(self.run_dir) / FAILURES_LOG, "a") as f:
                f.write(json.dumps({"rank": failure.rank, "at_s": round(failure.at_s, 3), **line}) + "\n")
        except OSError:
            pass  # a run directory that cannot be written to must not hide the failure itself

    def _send(self, ident: bytes, msg: dict) -> None:
        """One control message to one rank (the Coordinator's router)."""
        raise NotImplementedError

    def abort_settled(self, now: float) -> bool:
        """After the abort: whether to stop waiting for ranks to report, blaming the silent ones.

        At the abort deadline in any case; sooner (SETTLE_S after the abort went out) once every rank
        that reported has also gone, if a silent rank may be the root cause: a hung rank would never
        answer, so waiting longer only delays the verdict. A failure that explains the run without
        them leaves the silent ranks the whole grace, to answer the abort as the others did. Before an
        abort there is nothing to settle."""
        deadline = self.abort_deadline
        if deadline is None:
            return False
        everyone = set(range(self.n))
        silent = everyone - self.exited - self.reported - self.lost
        # Under another launcher a rank that never registered may just be late: it was never told
        # of the abort, so it is not blamed as hung, and the grace is kept for it to register
        # and hear of the abort (a rank that never comes times out on its own).
        unregistered = set() if self.watch_exits else silent - set(self.identities)
        settled = now > deadline or (
            not unregistered
            and self.exited | self.lost | silent == everyone
            and not (silent and is_explained(self.failures))
            and now > max(deadline - ABORT_GRACE_S, self.last_told) + SETTLE_S
        )
        if settled:
            self.blame_silent(silent - unregistered)
        return settled

    def on_error(self, rank: int, msg: dict) -> None:
        """A rank reported the exception that ended it."""
        if msg.get("error_type") == ScenarioMismatch.__name__ and self.failures:
            return  # the rank repeats what the coordinator told it: the root cause is already recorded
        text = f"{msg.get('error_type', 'Error')}: {msg.get('message', '')}"
        failure = RankFailure(
            rank,
            self.elapsed_s(),
            "error",
            text,
            msg.get("traceback", ""),
            pid=self.pids.get(rank),
            host=self.hosts.get(rank, ""),
            secondary=bool(msg.get("secondary")),
            error_type=msg.get("error_type", ""),
        )
        if msg.get("waiting_for") is not None:
            failure.waiting_for = msg["waiting_for"]
        self.fail(failure)

    def check_heartbeats(self, now: float, started_at: float, lost_s: float) -> None:
        """Declare lost every rank still at work that has been silent for `lost_s` (heartbeat_lost_s)
        since its last heartbeat, or since every rank registered (`started_at`)."""
        for rank in range(self.n):
            if rank in self.exited or rank in self.reported or rank in self.lost:
                continue
            silence = now - max(self.last_beat.get(rank, 0.0), started_at)
            if silence <= lost_s:
                continue
            self.lost.add(rank)
            host = self.hosts.get(rank, "")
            why = self.host_notes.get(host) or "its host is unreachable, or the process is stopped"
            self.fail(
                RankFailure(
                    rank,
                    now - self.t0,
                    "lost",
                    f"lost: no heartbeat for {silence:.1f}s ({why})",
                    pid=self.pids.get(rank),
                    host=host,
                )
            )

    def check_stopped(self, now: float) -> None:
        """Fail every rank still at work whose process on this host has been stopped for STOPPED_S
        (read every STATE_POLL_S). It is declared at once, not blamed after the abort: it would
        never answer one. Under another launcher it is also killed, as blame_silent kills a hung one."""
        if now < self.next_state_poll:
            return
        self.next_state_poll = now + STATE_POLL_S
        for rank, pid in list(self.pids.items()):
            if rank in self.exited or rank in self.reported or rank in self.lost or not self._is_local(rank):
                continue
            state = process_state(pid)
            if state not in _STOPPED:
                self.stopped_since.pop(rank, None)
                continue
            since = self.stopped_since.setdefault(rank, now)
            if now - since < STOPPED_S:
                continue
            self.lost.add(rank)
            failure = RankFailure(
                rank,
                now - self.t0,
                "stopped",
                f"{_STOPPED[state]} for {now - since:.1f}s: it can neither work nor answer",
                pid=pid,
                host=self.hosts.get(rank, ""),
            )
            if not self.watch_exits and self._kill(rank):
                failure.message += ", so the coordinator killed it"
            self.fail(failure)

    def _is_local(self, rank: int) -> bool:
        if rank not in self.local:
            self.local[rank] = self._can_signal(rank)
        return self.local[rank]

    def blame_silent(self, silent: set[int]) -> None:
        """Ranks that neither reported nor exited after the abort are hung. They become the root cause
        unless a recorded failure explains the run without them; then they follow it, as consequences."""
        explained = is_explained(self.failures)
        gone = {r for r in silent if not self.watch_exits and self._is_gone(r)}
        hung = []
        for rank in blame_order(silent, self.failures, gone):
            why = waiters_of(rank, self.failures) or "did not finish"
            if rank in gone:
                what = f"its process is gone: it exited or was killed without reporting ({why})"
            else:
                what = f"unresponsive ({why}; it did not answer the abort)"
            stack = self.dump_stack(rank)
            if not self.watch_exits and self._can_signal(rank) and self._kill(rank):
                what = what[:-1] + ", so the coordinator killed it)"
            what += flight_note(self.run_dir, rank)
            hung.append(
                RankFailure(
                    rank,
                    self.elapsed_s(),
                    "hang",
                    what,
                    pid=self.pids.get(rank),
                    host=self.hosts.get(rank, ""),
                    stack=stack,
                    secondary=explained,
                )
            )
        if hung and explained:
            self.failures.extend(hung)
        elif hung:
            for f in self.failures:
                f.secondary = True
            self.failures[:0] = hung

    def dump_stack(self, rank: int) -> str:
        """Where a silent rank is stuck: ask it for a faulthandler dump (SIGUSR1), if it is ours to signal."""
        if not self._can_signal(rank):
            return ""
        path = self.run_dir / f"rank-{rank}.stack"
        try:
            os.kill(self.pids[rank], signal.SIGUSR1)
        except (ProcessLookupError, KeyError):
            return ""
        # The rank writes its dump line by line while we read: it is whole once two reads a poll
        # apart agree (a long dump on a busy host can be read after its first line).
        deadline = time.monotonic() + STACK_WAIT_S
        text = ""
        while time.monotonic() < deadline:
            time.sleep(STACK_POLL_S)
            before, text = text, path.read_text() if path.exists() else ""
            if text.strip() and text == before:
                return text
        return text

    def _can_signal(self, rank: int) -> bool:
        """Our own children always; under another launcher only a playground process on this host
        (a pid from elsewhere, or one reused since the rank died, must not get SIGUSR1)."""
        if self.watch_exits:
            return True
        if rank not in self.pids or self.hosts.get(rank) != socket.gethostname():
            return False
        try:
            with open(f"/proc/{self.pids[rank]}/cmdline", "rb") as f:
                return b"playground" in f.read()
        except OSError:
            return False

    def _kill(self, rank: int) -> bool:
        """Stop a hung rank on this host, as our own launcher would: nobody else may (a shell loop)."""
        try:
            os.kill(self.pids[rank], signal.SIGKILL)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def _is_gone(self, rank: int) -> bool:
        """On this host: the process no longer runs (absent, or a zombie its launcher has not reaped yet)."""
        if rank not in self.pids or self.hosts.get(rank) != socket.gethostname():
            return False
        return process_state(self.pids[rank]) in (None, "Z", "X")


def flight_note(run_dir: Path, rank: int) -> str:
    """ "; its flight recorder: in allreduce ring #17 (...), started": where a silent rank's ring says
    it is (read from its file: a hung or dead rank need not answer); "" without one."""
    try:
        ring = flight.read_ring(flight.ring_path(run_dir, rank))
    except (OSError, ValueError):
        return ""
    current = ring.current
    if current is not None:
        return f"; its flight recorder: in {flight_report.describe(current)}, {current['state']}"
    last = ring.last_completed
    return (
        f"; its flight recorder: in no collective, the last completed {flight_report.describe(last)}"
        if last
        else ""
    )


def process_state(pid: int) -> str | None:
    """The one-letter state of process `pid` in /proc (R running, S sleeping, T stopped, t traced,
    Z zombie, ...), None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def waiters_of(rank: int, failures: list[RankFailure]) -> str:
    """Who was waiting for silent `rank`, and how each found out: "rank 0 timed out waiting for it;
    rank 2 was waiting for it when the run was aborted" ("" if nobody)."""
    timed_out = sorted(
        f.rank for f in failures if f.waiting_for == rank and f.error_type == CommTimeout.__name__
    )
    aborted = sorted(
        f.rank for f in failures if f.waiting_for == rank and f.error_type != CommTimeout.__name__
    )
    parts = []
    if timed_out:
        parts.append(f"rank {', '.join(map(str, timed_out))} timed out waiting for it")
    if aborted:
        were = "was" if len(aborted) == 1 else "were"
        parts.append(f"rank {', '.join(map(str, aborted))} {were} waiting for it when the run was aborted")
    return "; ".join(parts)
