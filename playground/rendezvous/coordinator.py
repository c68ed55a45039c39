"""The coordinator: the rendezvous of a run, the one place that knows every rank's state.

Ranks talk to it over a ZeroMQ ROUTER with the control messages of `playground.rendezvous.join`:
register -> (all registered, all running the same scenario) clock probes to each rank in turn
(playground.tracing.clocks), then the table to everyone, each with its clock offset; progress -> the
launcher's bar; done -> (all done) release to everyone; error -> record the failure and abort the
others. Which failure is the root cause, and how silent, dead or lost ranks are blamed, is
`playground.rendezvous.failures` (mixed in: it shares this state).

Two owners use it: `Launcher`, which forks the ranks and watches their processes
(`watch_exits=True`), and rank 0 under another launcher (`playground.launcher.external`,
torchrun / mpiexec / srun), which cannot (`watch_exits=False`; `failures` says what differs).

Anyone who can reach the port can send it anything. A message that is not one of ours
(playground.rendezvous.messages says which) is ignored and counted: the first one is said on stderr,
the total when the loop ends. A well-formed message that cannot fit this run (a rank outside
0..N-1, ranks that resolved different scenarios) fails the run with one clear error, and a rank
that registers after the run was aborted is told so at once.

With emulated hosts (`heartbeat_lost_s` set) every rank also beats every 0.25 s on its own socket
(the failure side declares a silent one lost). The launcher's host drills hook in here: `timers`
run at a time after every rank registered, `on_fault` answers a rank's drill request, and `events`
records what was done to the cluster, for result.json.
"""

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import zmq

from playground.config.fingerprint import mismatch_message
from playground.core.errors import ScenarioMismatch
from playground.rendezvous.failures import FailureDetection, LaunchOutcome, RankFailure, link_waits_first
from playground.rendezvous.messages import MalformedControl, parse_control
from playground.tracing.clocks import ProbeRound

POLL_MS = 100  # longest single wait of the loop; deadlines, heartbeats, process states between
REPORT_GRACE_S = 0.5  # how long a rank seen gone may still have its last report in flight
MAX_DRAIN = 1000  # messages handled between deadline checks, so a flood cannot starve them


class Coordinator(FailureDetection):
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
        generation: int = 0,
        live: bool = False,
        backlog: list[list[bytes]] | None = None,
    ):
        super().__init__(run_dir, watch_exits, heartbeat_lost_s)
        self.n = world_size
        self.generation = generation  # the group it serves; a message of another one is refused
        # live recovery (`recovery.way: peer`): the loop ends at the first failure, once the abort
        # went out, so that the launcher can start a replacement while the survivors re-form; what
        # they send the next generation meanwhile is kept (`early`) for its coordinator (`backlog`)
        self.live = live
        self.live_refused = False  # the launcher stops the group after all (`refuse_live`)
        self.early: list[list[bytes]] = []
        self.backlog = list(backlog or [])
        self.num_stale = 0  # messages of another generation refused (the first is said on stderr)
        self.resumed: dict[int, dict] = {}  # rank -> how it went on from a checkpoint (its report)
        self.progress_done = 0  # the last progress rank 0 reported: steps done, for a restart's record
        self.timeout_s = timeout_s
        self.on_progress = on_progress
        self.router: zmq.Socket | None = None
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.identities: dict[int, bytes] = {}
        self.endpoints: dict[int, str] = {}
        self.local_endpoints: dict[int, str] = {}
        self.results: list[dict | None] = [None] * world_size
        self.reported: set[int] = set()  # ranks that sent done or error
        self.exited: set[int] = set()  # ranks that are gone (process exit, or last word said)
        self.released = False
        self.register_deadline = self.t0 + max(30.0, timeout_s)
        self.fingerprints: dict[int, str] = {}
        self.scenarios: dict[int, dict] = {}
        self.num_ignored = 0  # malformed control messages, counted (the first is said on stderr)
        self.probes: ProbeRound | None = None  # clock probes, once every rank has registered
        self.arrived_ns = 0  # when the message being handled was taken off the socket
        self.last_beat: dict[int, float] = {}
        self.started_at: float | None = None  # when every rank had registered (the table went out)
        self.timers: list[tuple[float, Callable[[], None]]] = []  # (seconds after started_at, call), in order
        self.on_fault: Callable[[int, dict], None] | None = (
            None  # a rank asks for its drill (cut its link, ...)
        )
        # runs once every rank registered, just before the tables go out (a shrunk group's logs
        # renamed while no rank can write to them)
        self.on_table: Callable[[], None] | None = None

    def outcome(self, interrupted: bool = False) -> LaunchOutcome:
        failures = link_waits_first(self.failures, self.hosts, self.host_notes)
        return LaunchOutcome(self.results, failures, self.elapsed_s(), interrupted, self.events, self.t0)

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
        backlog, self.backlog = self.backlog, []
        for parts in backlog:  # what the survivors sent this generation before it had a coordinator
            self.handle(parts)
        while len(self.exited) < self.n and not (stop is not None and stop.is_set()):
            if self.live and self.failures:
                break
            for sock, _ in poller.poll(POLL_MS):
                if sock is router:
                    self.drain(router)
                else:
                    poller.unregister(sock)
                    watch.pop(sock)()
            if self.tick():
                break
        if self.num_ignored > 1:
            self._say(f"coordinator: ignored {self.num_ignored} malformed control messages in all")

    def drain(self, router: zmq.Socket) -> None:
        """Handle the control messages waiting on the router (at most MAX_DRAIN)."""
        for _ in range(MAX_DRAIN):
            if not router.poll(0):
                return
            self.handle(router.recv_multipart())

    def handle(self, parts: list[bytes]) -> None:
        """One ROUTER delivery [identity, JSON]: parsed, checked and acted on."""
        self.arrived_ns = time.monotonic_ns()
        msg = self.parse(parts)
        if msg is not None:
            self.on_message(parts[0], msg)

    def await_report(self, rank: int, timeout_s: float = REPORT_GRACE_S) -> bool:
        """Whether `rank` has reported, reading the router for up to `timeout_s` first. A rank
        that reports its error and exits can be seen gone (its sentinel) before its report is read
        off the socket: without this, its root cause would read "exited before finishing"."""
        deadline = time.monotonic() + timeout_s
        router = self.router
        while rank not in self.reported and router is not None:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not router.poll(left_ms):
                break
            self.drain(router)
        return rank in self.reported

    def parse(self, parts: list[bytes]) -> dict | None:
        """The message of a ROUTER delivery [identity, JSON], or None (ignored and counted): also one
        of another rendezvous generation, such as a late word of the group before a restart."""
        try:
            msg = parse_control(parts)
        except MalformedControl as e:
            self.ignore(parts[0], str(e))
            return None
        generation = msg.get("generation", 0)
        if self.live and generation == self.generation + 1:
            self.early.append(parts)  # a survivor re-forming: the next generation's coordinator's
            return None
        if self.live_refused and generation == self.generation + 1:
            if msg["type"] != "register":
                return msg  # a survivor's last word (its PeerLost), said from its new socket
            self._tell_final(parts[0])
            return None
        if generation != self.generation:
            self.num_stale += 1
            if self.live and generation == self.generation - 1:
                return None  # a survivor's last words to the group before (progress): expected, counted
            if self.num_stale == 1:
                self._say(
                    f"coordinator: refused a {msg['type']!r} message of generation {generation} from "
                    f"{parts[0][:32]!r}: this is generation {self.generation} (further ones are only counted)"
                )
            return None
        return msg

    def refuse_live(self) -> None:
        """The group is not recovered live after all: it stops as it always does (the abort settles),
        and a survivor already re-forming for the next generation is told now, not left waiting."""
        self.live, self.live_refused = False, True
        for parts in self.early:
            try:
                if parse_control(parts).get("type") == "register":
                    self._tell_final(parts[0])
            except MalformedControl:
                pass
        self.early = []

    def _tell_final(self, ident: bytes) -> None:
        """The abort, marked final: the rank must not try another generation."""
        self._send(
            ident,
            {**(self.abort_message or {"type": "abort", "reason": "the run was aborted"}), "final": True},
        )

    def ignore(self, ident: bytes, why: str) -> None:
        self.num_ignored += 1
        if self.num_ignored == 1:
            self._say(
                f"coordinator: ignored a malformed control message from {ident[:32]!r}: {why} "
                f"(further ones are only counted)"
            )

    @staticmethod
    def _say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def on_message(self, ident: bytes, msg: dict) -> None:
        kind = msg["type"]
        if kind == "progress":
            self.progress_done = msg.get("done", self.progress_done)
            if self.on_progress:
                self.on_progress(msg)
            return
        rank: int = msg["rank"]  # every other kind carries one, an int (messages.py checked)
        if kind in ("register", "done", "error") and not 0 <= rank < self.n:
            if self.abort_message is None or kind == "register":
                self.fail(
                    RankFailure(
                        rank,
                        self.elapsed_s(),
                        "register",
                        f"sent {kind} as rank {rank!r}, but the run has {self.n} ranks "
                        f"(is WORLD_SIZE the same for every process?)",
                        pid=msg.get("pid"),
                    )
                )
            if (
                kind == "register" and self.abort_message is not None
            ):  # it waits for a table: say why none comes
                self._send(ident, self.abort_message)
            return
        if kind == "register":
            self.on_register(ident, rank, msg)
        elif kind == "heartbeat":
            self.last_beat[rank] = time.monotonic()
        elif kind == "resumed":  # once loaded, then again after its first step
            self.resumed.setdefault(rank, {}).update(msg)
        elif kind == "fault":
            if self.on_fault is not None:
                self.on_fault(rank, msg)
        elif kind == "clock":
            if self.probes is not None and self.probes.answer(rank, msg["seq"], msg["t_us"], self.arrived_ns):
                self.probe_next()
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

    def on_register(self, ident: bytes, rank: int, msg: dict) -> None:
        """Rank `rank`'s endpoints, host and scenario; once every rank has registered (with the same
        scenario), the clock probes begin."""
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

    def probe_next(self) -> None:
        """Send the next clock probe; after the last one, every rank's table with its clock offset."""
        probes = self.probes
        if self.abort_deadline is not None or probes is None:
            return
        probe = probes.next_probe()
        if probe is not None:
            self._send(self.identities[probe[0]], {"type": "clock", "seq": probe[1]})
            return
        clocks = probes.estimates()
        endpoints = [self.endpoints[r] for r in range(self.n)]
        local_endpoints = [self.local_endpoints[r] for r in range(self.n)]
        hosts = [self.hosts[r] for r in range(self.n)]
        if self.on_table is not None:
            self.on_table()
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
        self.check_stopped(now)
        if self.started_at is not None:
            while self.timers and now >= self.started_at + self.timers[0][0]:
                self.timers.pop(0)[1]()
            if self.heartbeat_lost_s is not None:
                self.check_heartbeats(now, self.started_at, self.heartbeat_lost_s)
        return self.abort_settled(now)

    # -- failing the run ---------------------------------------------------------------------
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

    # -- sending -----------------------------------------------------------------------------
    def _send(self, ident: bytes, msg: dict) -> None:
        if self.router is not None:
            self.router.send_multipart([ident, json.dumps(msg).encode()])

    def _broadcast(self, msg: dict) -> None:
        for r in range(self.n):
            if r in self.identities:
                self._send(self.identities[r], msg)
