"""Start N rank processes, coordinate them, and tear everything down whatever happens.

Ranks are forked from this process after the scenario (and numpy, pyzmq, the node module) are
imported, which starts eight ranks in about 0.1 s instead of 1-3 s; the ZeroMQ context is created
only after the fork. One poll loop watches both the coordinator socket and every process's exit
sentinel, so a rank that dies is noticed at once: the others are told to abort (their waits raise
PeerLost immediately), and the first failure is reported as the root cause.
"""

import json
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import multiprocess
import zmq

from playground import rendezvous
from playground.comm.shm import remove_shm_dir
from playground.scenario import Scenario
from playground.worker import child_main

ABORT_GRACE_S = 2.0  # after an abort, how long ranks get to report and exit before SIGKILL
STACK_WAIT_S = 0.3  # how long a hung rank gets to dump its stack on SIGUSR1
SETTLE_S = 0.3  # after an abort, how long to wait for slower ranks to report before blaming silent ones


@dataclass
class RankFailure:
    rank: int
    at_s: float
    kind: str  # "error", "signal", "exit", "hang", "register"
    message: str
    traceback: str = ""
    pid: int | None = None
    host: str = ""
    secondary: bool = False  # a consequence of another rank's failure (PeerLost)
    stack: str = ""
    waiting_for: int | None = None  # the peer a timed-out rank was waiting for

    def headline(self) -> str:
        where = f" (pid {self.pid}{' on ' + self.host if self.host else ''})" if self.pid else ""
        return f"rank {self.rank}{where} at {self.at_s:.2f}s: {self.message}"


@dataclass
class LaunchOutcome:
    results: list[dict | None]
    failures: list[RankFailure] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures and not self.interrupted and all(r is not None for r in self.results)

    @property
    def root_cause(self) -> RankFailure | None:
        primary = [f for f in self.failures if not f.secondary]
        return (primary or self.failures or [None])[0]


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Launcher:
    def __init__(self, scenario: Scenario, run_dir: Path, on_progress=None):
        self.scenario = scenario
        self.run_dir = run_dir
        self.on_progress = on_progress
        self.n = scenario.ranks
        self.procs = []
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.results: list[dict | None] = [None] * self.n
        self.failures: list[RankFailure] = []
        self.reported: set[int] = set()  # ranks that sent done or error
        self.exited: set[int] = set()
        self.t0 = time.monotonic()
        self.abort_deadline: float | None = None
        self.ipc_dir = ""

    def _env(self, rank: int, port: int) -> dict:
        return {"RANK": str(rank), "WORLD_SIZE": str(self.n), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "PLAYGROUND_RUN_DIR": str(self.run_dir), "PLAYGROUND_IPC_DIR": self.ipc_dir}

    def run(self) -> LaunchOutcome:
        """Run every rank to the end; Ctrl-C or SIGTERM stops all of them and returns interrupted."""
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> LaunchOutcome:
        port = rendezvous.free_tcp_port()
        self.ipc_dir = rendezvous.ipc_dir(port)
        mp = multiprocess.get_context("fork")
        interrupted = False
        try:
            # Hold Ctrl-C while forking: a child must not see it before it has set its own handlers.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                for rank in range(self.n):
                    p = mp.Process(target=child_main, args=(self.scenario, self.run_dir, self._env(rank, port)),
                                   name=f"rank-{rank}")
                    p.start()
                    self.procs.append(p)
                    self.pids[rank] = p.pid
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
            ctx = zmq.Context()
            try:
                router = ctx.socket(zmq.ROUTER)
                router.setsockopt(zmq.LINGER, 0)
                router.bind(f"tcp://127.0.0.1:{port}")
                self._loop(router)
            finally:
                ctx.destroy(linger=0)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self._kill_all()
            self._cleanup_ipc()
            remove_shm_dir(port)
        return LaunchOutcome(self.results, self.failures, time.monotonic() - self.t0, interrupted)

    # -- the poll loop -------------------------------------------------------------------
    def _loop(self, router: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        sentinels = {p.sentinel: rank for rank, p in enumerate(self.procs)}
        for fd in sentinels:
            poller.register(fd, zmq.POLLIN)
        identities: dict[int, bytes] = {}
        endpoints: dict[int, str] = {}
        register_deadline = time.monotonic() + max(30.0, self.scenario.timeout_s)
        released = False
        while len(self.exited) < self.n:
            timeout_ms = 200
            for sock, _ in poller.poll(timeout_ms):
                if sock is router:
                    while router.poll(0):
                        ident, raw = router.recv_multipart()
                        msg = json.loads(raw)
                        kind, rank = msg.get("type"), msg.get("rank")
                        if kind == "register":
                            identities[rank], endpoints[rank] = ident, msg["endpoint"]
                            self.hosts[rank] = msg.get("host", "")
                            if len(endpoints) == self.n:
                                table = {"type": "table", "endpoints": [endpoints[r] for r in range(self.n)],
                                         "host": socket.gethostname(), "t_us": time.monotonic_ns() / 1000}
                                for r in range(self.n):
                                    router.send_multipart([identities[r], json.dumps(table).encode()])
                        elif kind == "clock":
                            router.send_multipart([ident, json.dumps(
                                {"type": "clock", "t_us": time.monotonic_ns() / 1000}).encode()])
                        elif kind == "progress":
                            if self.on_progress:
                                self.on_progress(msg)
                        elif kind == "done":
                            self.results[rank] = msg.get("result", {})
                            self.reported.add(rank)
                            if not released and all(r is not None for r in self.results):
                                released = True
                                for r in range(self.n):
                                    router.send_multipart([identities[r], b'{"type": "release"}'])
                        elif kind == "error":
                            self.reported.add(rank)
                            self._on_error(rank, msg, router, identities)
                else:
                    rank = sentinels.pop(sock)
                    poller.unregister(sock)
                    self._on_exit(rank, router, identities)
            now = time.monotonic()
            if len(endpoints) < self.n and now > register_deadline and self.abort_deadline is None:
                missing = sorted(set(range(self.n)) - set(endpoints))
                self._fail(RankFailure(missing[0], now - self.t0, "register",
                                       f"did not register with the coordinator within "
                                       f"{register_deadline - self.t0:.0f}s (missing ranks {missing})",
                                       pid=self.pids.get(missing[0])), router, identities)
            if self.abort_deadline is not None:
                silent = set(range(self.n)) - self.exited - self.reported
                if now > self.abort_deadline or (self.exited | silent == set(range(self.n))
                                                 and now > self.abort_deadline - ABORT_GRACE_S + SETTLE_S):
                    self._blame_silent(silent)
                    return

    def _fail(self, failure: RankFailure, router, identities) -> None:
        self.failures.append(failure)
        if self.abort_deadline is None:
            self.abort_deadline = time.monotonic() + ABORT_GRACE_S
            reason = f"rank {failure.rank} failed: {failure.message.splitlines()[0] if failure.message else failure.kind}"
            for r, ident in identities.items():
                if r != failure.rank and r not in self.exited:
                    router.send_multipart([ident, json.dumps({"type": "abort", "reason": reason}).encode()])

    def _on_error(self, rank: int, msg: dict, router, identities) -> None:
        text = f"{msg.get('error_type', 'Error')}: {msg.get('message', '')}"
        failure = RankFailure(rank, time.monotonic() - self.t0, "error", text, msg.get("traceback", ""),
                              pid=self.pids.get(rank), host=self.hosts.get(rank, ""),
                              secondary=bool(msg.get("secondary")))
        if msg.get("waiting_for") is not None:
            failure.waiting_for = msg["waiting_for"]
        self._fail(failure, router, identities)

    def _on_exit(self, rank: int, router, identities) -> None:
        proc = self.procs[rank]
        proc.join(1.0)
        self.exited.add(rank)
        code = proc.exitcode
        if rank in self.reported and (code == 0 or self.results[rank] is None):
            return  # reported done (exit 0) or already reported its error
        if code is not None and code < 0:
            message = f"killed by {_signal_name(code)}"
            kind = "signal"
        else:
            message = f"exited with status {code} before finishing"
            kind = "exit"
        self._fail(RankFailure(rank, time.monotonic() - self.t0, kind, message, pid=self.pids.get(rank),
                               host=self.hosts.get(rank, "")), router, identities)

    def _blame_silent(self, silent: set[int]) -> None:
        """Ranks that neither reported nor exited after the abort are hung: they become the root cause."""
        waited_on = {f.waiting_for for f in self.failures if f.waiting_for is not None}
        hung = []
        for rank in sorted(silent, key=lambda r: (r not in waited_on, r)):
            waiters = sorted(f.rank for f in self.failures if f.waiting_for == rank)
            why = f"rank {', '.join(map(str, waiters))} timed out waiting for it" if waiters else "did not finish"
            hung.append(RankFailure(rank, time.monotonic() - self.t0, "hang",
                                    f"unresponsive ({why}; it did not answer the abort)",
                                    pid=self.pids.get(rank), host=self.hosts.get(rank, ""),
                                    stack=self._dump_stack(rank)))
        if hung:
            for f in self.failures:
                f.secondary = True
            self.failures[:0] = hung

    def _dump_stack(self, rank: int) -> str:
        """Where a silent rank is stuck: ask it for a faulthandler dump (SIGUSR1)."""
        path = self.run_dir / f"rank-{rank}.stack"
        try:
            os.kill(self.pids[rank], signal.SIGUSR1)
        except (ProcessLookupError, KeyError):
            return ""
        deadline = time.monotonic() + STACK_WAIT_S
        while time.monotonic() < deadline:
            text = path.read_text() if path.exists() else ""
            if text.strip():
                return text
            time.sleep(0.02)
        return ""

    # -- teardown --------------------------------------------------------------------------
    def _kill_all(self) -> None:
        for p in self.procs:
            if p.exitcode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for rank, p in enumerate(self.procs):
            p.join(5.0)
            if rank not in self.exited and p.exitcode is not None:
                self.exited.add(rank)
                if rank not in self.reported and not any(f.rank == rank for f in self.failures):
                    self.failures.append(RankFailure(rank, time.monotonic() - self.t0, "signal",
                                                     "killed by the launcher after the run was aborted",
                                                     pid=p.pid, secondary=True))

    def _cleanup_ipc(self) -> None:
        d = self.ipc_dir
        if d and os.path.isdir(d):
            for name in os.listdir(d):
                if name.startswith("rank-") and name.endswith(".sock"):
                    try:
                        os.unlink(os.path.join(d, name))
                    except OSError:
                        pass
            try:
                os.rmdir(d)
            except OSError:
                pass
