"""The coordinator: the one place that knows every rank's state during a run.

Ranks talk to it over a ZeroMQ ROUTER with the control messages of `playground.rendezvous.join`:
register -> (all registered, all running the same scenario) clock probes to each rank in turn
(playground.tracing.clocks), then the table to everyone, each with its clock offset; progress -> the
launcher's bar; done -> (all done) release to everyone; error -> record the failure and abort the
others.
The first failure is the root cause; failures that are consequences of it (PeerLost) are marked
secondary. Ranks that neither report nor go away after an abort are blamed as hung, with their
stack when this host can ask them for it.

Two owners use it. `Launcher` forks the ranks itself and also watches each process's exit
sentinel (`watch_exits=True`): a rank is gone when its process is. Under another launcher
(`playground.launcher.external`, torchrun / mpiexec / srun) there are no sentinels (`watch_exits=False`):
a rank counts as gone once it has said its last word (an error, or done and released), and a rank
that dies silently is found by its peers' receive timeouts.

Anyone who can reach the port can send it anything. A message that is not one of ours
(playground.rendezvous.messages says which) is ignored and counted: the first one is said on stderr,
the total when the loop ends. A well-formed message that cannot fit this run (a rank outside
0..N-1, ranks that resolved different scenarios) fails the run with one clear error, and a rank
that registers after the run was aborted is told so at once.

With emulated hosts (`heartbeat_lost_s` set) every rank also beats every 0.5 s on its own socket; a
rank not heard from for `heartbeat_lost_s` is declared lost, so a cut host link (which kills nothing)
is noticed within HEARTBEAT_LOST_S + POLL_MS, not after the 30 s receive timeout. The launcher's host
drills hook in here: `timers` run at a time after every rank registered, `on_fault` answers a
rank's drill request, and `events` records what was done to the cluster, for result.json.
"""

import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from playground.config.fingerprint import mismatch_message
from playground.core.errors import ScenarioMismatch
from playground.rendezvous.messages import MalformedControl, parse_control
from playground.tracing.clocks import ProbeRound

ABORT_GRACE_S = 2.0  # after an abort, how long ranks get to report and exit before SIGKILL
STACK_WAIT_S = 0.5  # how long a hung rank gets to dump its stack on SIGUSR1
STACK_POLL_S = 0.02
SETTLE_S = 0.3  # after an abort, how long to wait for slower ranks to report before blaming silent ones
POLL_MS = 200  # longest single wait of the loop; deadlines are checked between waits
REPORT_GRACE_S = 0.5  # how long a rank seen gone may still have its last report in flight
MAX_DRAIN = 1000  # messages handled between deadline checks, so a flood cannot starve them
HEARTBEAT_LOST_S = 2.0  # a rank not heard from for this long is lost (it beats every 0.5 s)


@dataclass
class RankFailure:
    rank: int
    at_s: float
    kind: str  # "error", "signal", "exit", "hang", "register", "lost"
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


@dataclass
class LaunchOutcome:
    results: list[dict | None]
    failures: list[RankFailure] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False
    events: list[dict] = field(default_factory=list)  # what was done to the emulated cluster, when

    @property
    def ok(self) -> bool:
        return not self.failures and not self.interrupted and all(r is not None for r in self.results)

    @property
    def root_cause(self) -> RankFailure | None:
        primary = [f for f in self.failures if not f.secondary]
        return (primary or self.failures or [None])[0]


class Coordinator:
    """Registration, release and abort for `world_size` ranks; the loop is `serve`.

    Not thread-safe: the thread that calls `serve` owns the router socket and all the state; read
    `outcome()` only after `serve` has returned.
    """

    def __init__(
        self,
        world_size: int,
        timeout_s: float,
        run_dir: Path,
        on_progress=None,
        watch_exits: bool = True,
        heartbeat_lost_s: float | None = None,
    ):
        self.n = world_size
        self.timeout_s = timeout_s
        self.run_dir = run_dir
        self.on_progress = on_progress
        self.watch_exits = watch_exits
        self.t0 = time.monotonic()
        self.router: zmq.Socket | None = None
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.identities: dict[int, bytes] = {}
        self.endpoints: dict[int, str] = {}
        self.local_endpoints: dict[int, str] = {}
        self.results: list[dict | None] = [None] * world_size
        self.failures: list[RankFailure] = []
        self.reported: set[int] = set()  # ranks that sent done or error
        self.exited: set[int] = set()  # ranks that are gone (process exit, or last word said)
        self.released = False
        self.abort_deadline: float | None = None
        self.abort_message: dict | None = None  # what every rank was told, once the run was aborted
        self.last_told = 0.0  # when the abort last went out (to a rank that registered late)
        self.register_deadline = self.t0 + max(30.0, timeout_s)
        self.fingerprints: dict[int, str] = {}
        self.scenarios: dict[int, dict] = {}
        self.num_ignored = 0  # malformed control messages, counted (the first is said on stderr)
        self.probes: ProbeRound | None = None  # clock probes, once every rank has registered
        self.arrived_ns = 0  # when the message being handled was taken off the socket
        self.heartbeat_lost_s = heartbeat_lost_s
        self.last_beat: dict[int, float] = {}
        self.lost: set[int] = set()  # declared lost: silent for heartbeat_lost_s
        self.started_at: float | None = None  # when every rank had registered (the table went out)
        self.timers: list[tuple[float, object]] = []  # (seconds after started_at, callable), in order
        self.on_fault = None  # callable(rank, msg): a rank asks for its drill (cut its link, ...)
        self.events: list[dict] = []
        self.host_notes: dict[str, str] = {}  # host -> what was done to it, quoted in failures

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def outcome(self, interrupted: bool = False) -> LaunchOutcome:
        return LaunchOutcome(self.results, self.failures, self.elapsed_s(), interrupted, self.events)

    def record(self, what: str, host: str = "") -> None:
        """Something done to the cluster (a drill): kept for result.json and quoted in the host's failures."""
        at_s = self.elapsed_s()
        self.events.append({"at_s": round(at_s, 3), "host": host, "event": what})
        if host:
            self.host_notes[host] = f"{what} at {at_s:.2f}s"

    # -- the loop --------------------------------------------------------------------------
    def serve(
        self, router: zmq.Socket, watch: dict | None = None, stop: threading.Event | None = None
    ) -> None:
        """Answer ranks until every rank is gone or an abort has settled.

        `watch` maps extra pollable file descriptors (process sentinels) to a callback run once when
        the descriptor becomes readable; `stop` ends the loop early from another thread.
        """
        self.router = router
        watch = dict(watch or {})
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        for fd in watch:
            poller.register(fd, zmq.POLLIN)
        while len(self.exited) < self.n and not (stop is not None and stop.is_set()):
            for sock, _ in poller.poll(POLL_MS):
                if sock is router:
                    self.drain()
                else:
                    poller.unregister(sock)
                    watch.pop(sock)()
            if self.tick():
                break
        if self.num_ignored > 1:
            self._say(f"coordinator: ignored {self.num_ignored} malformed control messages in all")

    def drain(self) -> None:
        """Handle the control messages waiting on the router (at most MAX_DRAIN)."""
        for _ in range(MAX_DRAIN):
            if not self.router.poll(0):
                return
            parts = self.router.recv_multipart()
            self.arrived_ns = time.monotonic_ns()
            msg = self.parse(parts)
            if msg is not None:
                self.on_message(parts[0], msg)

    def await_report(self, rank: int, timeout_s: float = REPORT_GRACE_S) -> bool:
        """Whether `rank` has reported, reading the router for up to `timeout_s` first. A rank
        that reports its error and exits can be seen gone (its sentinel) before its report is read
        off the socket: without this, its root cause would read "exited before finishing"."""
        deadline = time.monotonic() + timeout_s
        while rank not in self.reported and self.router is not None:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not self.router.poll(left_ms):
                break
            self.drain()
        return rank in self.reported

    def parse(self, parts: list[bytes]) -> dict | None:
        """The message of a ROUTER delivery [identity, JSON], or None (ignored and counted)."""
        try:
            return parse_control(parts)
        except MalformedControl as e:
            return self.ignore(parts[0], str(e))

    def ignore(self, ident: bytes, why: str) -> None:
        self.num_ignored += 1
        if self.num_ignored == 1:
            self._say(
                f"coordinator: ignored a malformed control message from {ident[:32]!r}: {why} "
                f"(further ones are only counted)"
            )
        return None

    @staticmethod
    def _say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def on_message(self, ident: bytes, msg: dict) -> None:
        kind, rank = msg.get("type"), msg.get("rank")
        if kind in ("register", "done", "error") and not (isinstance(rank, int) and 0 <= rank < self.n):
            if self.abort_message is None or kind == "register":
                self.fail(
                    RankFailure(
                        rank if isinstance(rank, int) else -1,
                        self.elapsed_s(),
                        "register",
                        f"sent {kind} as rank {rank!r}, but the run has {self.n} ranks "
                        f"(is WORLD_SIZE the same for every process?)",
                        pid=msg.get("pid"),
                    )
                )
            if kind == "register":  # that process waits for a table: tell it why none will come
                self._send(ident, self.abort_message)
            return
        if kind == "register":
            if self.abort_message is not None:  # registered after the abort went out: tell it now
                self._send(ident, self.abort_message)
                self.last_told = time.monotonic()
            self.identities[rank], self.endpoints[rank] = ident, msg["endpoint"]
            self.local_endpoints[rank] = msg.get("local_endpoint", "")
            self.hosts[rank] = msg.get("host", "")
            self.fingerprints[rank] = msg.get("scenario_hash", "")
            self.scenarios[rank] = msg.get("scenario") or {}
            if msg.get("pid") is not None:
                self.pids.setdefault(rank, msg["pid"])
            if len(self.endpoints) == self.n and self.abort_message is None and not self.check_scenarios():
                self.probes = ProbeRound(range(self.n))
                self.probe_next()
        elif kind == "heartbeat":
            if isinstance(rank, int):
                self.last_beat[rank] = time.monotonic()
        elif kind == "fault":
            if self.on_fault is not None and isinstance(rank, int):
                self.on_fault(rank, msg)
        elif kind == "clock":
            if self.probes is not None and self.probes.answer(rank, msg["seq"], msg["t_us"], self.arrived_ns):
                self.probe_next()
        elif kind == "progress":
            if self.on_progress:
                self.on_progress(msg)
        elif kind == "done":
            self.results[rank] = msg.get("result") or {}
            self.reported.add(rank)
            if not self.released and all(r is not None for r in self.results):
                self.released = True
                self._broadcast({"type": "release"})
                if not self.watch_exits:
                    self.exited.update(range(self.n))
        elif kind == "error":
            self.reported.add(rank)
            if not self.watch_exits:
                self.exited.add(rank)
            self.on_error(rank, msg)

    def probe_next(self) -> None:
        """Send the next clock probe; after the last one, every rank's table with its clock offset."""
        if self.abort_deadline is not None:
            return
        probe = self.probes.next_probe()
        if probe is not None:
            self._send(self.identities[probe[0]], {"type": "clock", "seq": probe[1]})
            return
        clocks = self.probes.estimates()
        endpoints = [self.endpoints[r] for r in range(self.n)]
        local_endpoints = [self.local_endpoints[r] for r in range(self.n)]
        hosts = [self.hosts[r] for r in range(self.n)]
        self.started_at = time.monotonic()
        for r in range(self.n):
            self._send(
                self.identities[r],
                {
                    "type": "table",
                    "endpoints": endpoints,
                    "local_endpoints": local_endpoints,
                    "hosts": hosts,
                    "host": socket.gethostname(),
                    "t_us": time.monotonic_ns() / 1000,
                    "clock": clocks[r].to_args() if r in clocks else None,
                },
            )

    def tick(self) -> bool:
        """Check the deadlines; True when the loop should end (an abort has settled)."""
        now = time.monotonic()
        if self.probes is not None and not self.probes.done and self.probes.overdue(time.monotonic_ns()):
            self.probe_next()
        if len(self.endpoints) < self.n and now > self.register_deadline and self.abort_deadline is None:
            missing = sorted(set(range(self.n)) - set(self.endpoints))
            self.fail(
                RankFailure(
                    missing[0],
                    now - self.t0,
                    "register",
                    f"did not register with the coordinator within "
                    f"{self.register_deadline - self.t0:.0f}s (missing ranks {missing})",
                    pid=self.pids.get(missing[0]),
                )
            )
        if self.started_at is not None:
            while self.timers and now >= self.started_at + self.timers[0][0]:
                self.timers.pop(0)[1]()
            if self.heartbeat_lost_s is not None:
                self.check_heartbeats(now)
        if self.abort_deadline is not None:
            everyone = set(range(self.n))
            silent = everyone - self.exited - self.reported - self.lost
            # Under another launcher a rank that never registered may just be late: it was never told
            # of the abort, so it is not blamed as hung, and the grace is kept for it to register
            # and hear of the abort (a rank that never comes times out on its own).
            unregistered = set() if self.watch_exits else silent - set(self.identities)
            if now > self.abort_deadline or (
                not unregistered
                and self.exited | self.lost | silent == everyone
                and now > max(self.abort_deadline - ABORT_GRACE_S, self.last_told) + SETTLE_S
            ):
                self.blame_silent(silent - unregistered)
                return True
        return False

    def check_heartbeats(self, now: float) -> None:
        """Declare lost every rank still at work that has been silent for heartbeat_lost_s."""
        for rank in range(self.n):
            if rank in self.exited or rank in self.reported or rank in self.lost:
                continue
            silence = now - max(self.last_beat.get(rank, 0.0), self.started_at)
            if silence <= self.heartbeat_lost_s:
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

    # -- failures ----------------------------------------------------------------------------
    def check_scenarios(self) -> bool:
        """Once every rank has registered: do they all run rank 0's scenario? If not, fail the run
        and tell every rank, the differing ones included, why (True)."""
        message = mismatch_message(self.fingerprints, self.scenarios)
        if message is None:
            return False
        first = min(r for r, fp in self.fingerprints.items() if fp != self.fingerprints.get(0))
        self.fail(
            RankFailure(
                first,
                self.elapsed_s(),
                "register",
                f"{ScenarioMismatch.__name__}: {message}",
                pid=self.pids.get(first),
                host=self.hosts.get(first, ""),
            ),
            abort={"reason": message, "error": ScenarioMismatch.__name__},
        )
        return True

    def fail(self, failure: RankFailure, abort: dict | None = None) -> None:
        """Record a failure; the first one also tells every other live rank to abort (every rank,
        the failed one included, when `abort` gives the message's fields)."""
        self.failures.append(failure)
        if self.abort_deadline is None:
            self.abort_deadline = time.monotonic() + ABORT_GRACE_S
            several = len(set(self.hosts.values())) > 1
            who = f"rank {failure.rank}" + (f" on host {failure.host}" if failure.host and several else "")
            reason = f"{who} failed: {failure.message.splitlines()[0] if failure.message else failure.kind}"
            message = self.abort_message = {"type": "abort", "reason": reason, **(abort or {})}
            for r, ident in self.identities.items():
                if (r != failure.rank or abort is not None) and r not in self.exited:
                    self._send(ident, message)

    def on_error(self, rank: int, msg: dict) -> None:
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

    def blame_silent(self, silent: set[int]) -> None:
        """Ranks that neither reported nor exited after the abort are hung: they become the root cause."""
        waited_on = {f.waiting_for for f in self.failures if f.waiting_for is not None}
        hung = []
        for rank in sorted(silent, key=lambda r: (r not in waited_on, r)):
            waiters = sorted(f.rank for f in self.failures if f.waiting_for == rank)
            why = (
                f"rank {', '.join(map(str, waiters))} timed out waiting for it"
                if waiters
                else "did not finish"
            )
            if not self.watch_exits and self._is_gone(rank):
                what = f"its process is gone: it exited or was killed without reporting ({why})"
            else:
                what = f"unresponsive ({why}; it did not answer the abort)"
            stack = self.dump_stack(rank)
            if not self.watch_exits and self._can_signal(rank) and self._kill(rank):
                what = what[:-1] + ", so the coordinator killed it)"
            hung.append(
                RankFailure(
                    rank,
                    self.elapsed_s(),
                    "hang",
                    what,
                    pid=self.pids.get(rank),
                    host=self.hosts.get(rank, ""),
                    stack=stack,
                )
            )
        if hung:
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
        # apart agree (CI once caught a dump with its first line only).
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
        try:
            with open(f"/proc/{self.pids[rank]}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    # -- sending -----------------------------------------------------------------------------
    def _send(self, ident: bytes, msg: dict) -> None:
        if self.router is not None:
            self.router.send_multipart([ident, json.dumps(msg).encode()])

    def _broadcast(self, msg: dict) -> None:
        for r in range(self.n):
            if r in self.identities:
                self._send(self.identities[r], msg)
