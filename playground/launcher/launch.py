"""Start N rank processes, coordinate them, and tear everything down whatever happens.

Ranks are forked from this process after the scenario (and numpy, pyzmq, the node module) are
imported, which starts eight ranks in about 0.1 s instead of 1-3 s; the ZeroMQ context is created
only after the fork. The Python API spawns them instead (`start_method="spawn"`, the `multiprocess`
package's context: each rank a fresh interpreter, the scenario and a rank function pickled with
dill), because it may run in a process where a fork is unsafe: a Jupyter kernel has ZeroMQ I/O
threads of its own, and a forked child would inherit them mid-flight. The `Coordinator`'s poll
loop watches both its socket and every process's exit sentinel, so a rank that dies is noticed at
once: the others are told to abort (their waits raise PeerLost immediately), and the first failure
is reported as the root cause. Ranks started by another launcher use the same Coordinator without
the sentinels (`playground.launcher.external`).

With `recovery.way: peer` or `shrink` a failure does not end the group (playground.launcher.live,
mixed in); every generation's scratch directory is then made with the one before it, and all of
them are removed at the end.

With emulated hosts (`scenario.hosts`) the launcher first builds the cluster (hosts/netns.py); each
forked rank enters its host's namespace, and the coordinator listens in the bridge namespace, which
every host reaches over its own link: the launcher's main thread enters it before it makes its ZeroMQ
context and leaves it once that context is gone. The cluster is removed in the same `finally` that
kills the ranks; a launcher that was SIGKILLed leaves it to the next launch's sweep.
"""

import contextlib
import functools
import json
import multiprocessing  # the stdlib one: with fork nothing is pickled, and it imports without dill
import os
import shutil
import signal
import sys
import threading
import time
import types
from pathlib import Path

import zmq

from playground.comm import flight_report
from playground.comm.addresses import free_tcp_port, ipc_dir, shm_dir_for
from playground.comm.registry import BY_NAME
from playground.config.scenario import Scenario
from playground.core import interrupts, scratch
from playground.core.errors import UsageError
from playground.core.topology import BRIDGE_ADDR
from playground.hosts import netns
from playground.hosts.drills import HostDrill
from playground.launcher.live import LiveRecovery
from playground.launcher.membership import LIVE_VARIABLE
from playground.launcher.worker import FAULT_FIRED_FILE, child_main
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.failures import HEARTBEAT_LOST_S, LaunchOutcome, RankFailure

__all__ = ["Launcher", "LaunchOutcome", "RankFailure"]

LOG_FLUSH_GRACE_S = 3.0  # a rank that has reported (done or error) may take this long to write its log
START_METHODS = ("fork", "spawn")  # fork: the command line's; spawn: the Python API's


class _Interrupts:
    """Ctrl-C and SIGTERM become KeyboardInterrupt only while the coordinator serves (`armed`).
    Elsewhere, while the cluster is built, ranks are forked, a namespace is entered or left, or
    everything is torn down, they are only remembered (and raised when serving starts): an exception
    in the middle of leaving a namespace or destroying a ZeroMQ context could strand the launcher
    in the bridge namespace or hang it at exit."""

    def __init__(self):
        self.armed = False
        self.pending = False

    def __call__(self, signum, frame):
        self.pending = True
        if self.armed:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def armed_here(self):
        self.armed = True
        try:
            if self.pending:
                raise KeyboardInterrupt
            yield
        finally:
            self.armed = False


def rank_cpus(scenario: Scenario) -> list[int] | None:
    """The CPU each rank is pinned to (scenario.bind), or None: ranks left to the scheduler.

    auto pins only where it is measured to help: ranks over shared memory poll their mailboxes
    with no thread of their own, and one that the scheduler moves, or places beside its peer,
    pays for it in every small message (8 B all-reduce, 2 ranks: 3.2-3.4 us pinned, 5.1-5.7 not).
    ZeroMQ's I/O threads, a node's communication thread or more ranks than CPUs would then share
    one CPU, so there auto leaves placement to the scheduler, as Open MPI does when oversubscribed."""
    available = sorted(os.sched_getaffinity(0))
    bind = scenario.bind
    if bind == "auto":
        one_thread = not scenario.contract.threaded
        polls_on_one_host = BY_NAME[scenario.transport].pinnable and not scenario.hosts
        bind = "core" if one_thread and polls_on_one_host and scenario.ranks <= len(available) else "none"
    if bind == "none":
        return None
    return [available[rank % len(available)] for rank in range(scenario.ranks)]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Launcher(LiveRecovery):
    """Starts the ranks (forked, or spawned: `start_method`) and adds what only a parent can do to
    the `Coordinator`: exit sentinels in the same poll loop, SIGKILL teardown, and Ctrl-C / SIGTERM
    handling. With a `supervisor` (`supervise.Supervisor`) a failed group is started again, each
    time a new rendezvous generation with a coordinator of its own on the same port and router, so a
    late message of the group before is refused; the cluster and the run's port outlive them."""

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        on_progress=None,
        start_method: str = "fork",
        supervisor=None,
    ):
        if start_method not in START_METHODS:
            raise UsageError(f"{start_method!r}: allowed: {', '.join(START_METHODS)}", field="start_method")
        self.start_method = start_method
        self.scenario = scenario
        self.run_dir = run_dir
        self.n = scenario.ranks
        self.on_progress = on_progress
        self.supervisor = supervisor
        self.generation = 0
        self.procs: list = []  # the ranks' processes (multiprocessing's, or multiprocess's when spawned)
        self.live = (
            scenario.recovery.way in ("peer", "shrink")
            and supervisor is not None
            and scenario.recovery.max_restarts > 0
        )
        self.scratch: list[str] = []  # every generation's scratch directories claimed, removed at the end
        self.backlog: list[list[bytes]] = []  # the next generation's messages its coordinator takes first
        self.coordinator = self._coordinator()
        self.ipc_dir = ""
        self.port = 0
        self.cluster: netns.Cluster | None = None
        self.interrupts = _Interrupts()

    def _coordinator(self) -> Coordinator:
        """The coordinator of the current generation."""
        return Coordinator(
            self.n,
            self.scenario.timeout_s,
            self.run_dir,
            self.on_progress,
            watch_exits=True,
            heartbeat_lost_s=HEARTBEAT_LOST_S if self.scenario.hosts else None,
            generation=self.generation,
            live=self.live,
            backlog=self.backlog,
        )

    def _env(self, rank: int, port: int) -> dict:
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(self.n),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PLAYGROUND_RUN_DIR": str(self.run_dir),
            "PLAYGROUND_IPC_DIR": ipc_dir(port),  # the base: a rank adds its generation's suffix
            "PLAYGROUND_GENERATION": str(self.generation),
            LIVE_VARIABLE: "1" if self.live else "0",
        }
        if self.cluster is not None:
            placement = self.scenario.placement
            env.update(self.cluster.rank_env(placement[rank]))
            env["LOCAL_RANK"] = str(placement[:rank].count(placement[rank]))
        return env

    def run(self) -> LaunchOutcome:
        """Run every rank to the end; Ctrl-C or SIGTERM stops all of them and returns interrupted;
        SIGUSR1 writes the flight recorder's dump (flight.json) while the run goes on."""
        if threading.current_thread() is not threading.main_thread():
            return self._run()  # signals reach only the main thread: there is nothing to catch here
        previous = {sig: signal.signal(sig, self.interrupts) for sig in (signal.SIGINT, signal.SIGTERM)}
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._dump_flight)
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _dump_flight(self, signum=None, frame=None) -> None:
        """`kill -USR1 <launcher>`: every rank's flight ring, and what they say together, into
        flight.json now (read from the rings' files: no rank is interrupted)."""
        written = flight_report.write_dump(self.run_dir, "on demand (SIGUSR1 to the launcher)")
        if written is not None:
            path, analysis = written
            lines = flight_report.summary_lines(analysis) or [
                "every rank is between collectives or in the same one"
            ]
            print(f"flight recorder: {path}: " + "; ".join(lines), file=sys.stderr, flush=True)

    def _run(self) -> LaunchOutcome:
        scratch.sweep_stale()  # left by launchers that were SIGKILLed
        netns.sweep_stale()
        self.port = port = free_tcp_port()
        mp = self._context()
        interrupted = False
        try:
            if self.scenario.hosts:
                self._build_cluster(self.scenario.hosts)
            self._start_ranks(mp, self.supervisor.first_env() if self.supervisor else {})
            with netns.entered(self.cluster.bridge_ns) if self.cluster else contextlib.nullcontext():
                ctx = zmq.Context()
                try:
                    router = ctx.socket(zmq.ROUTER)
                    router.setsockopt(zmq.LINGER, 0)
                    router.bind(f"tcp://{BRIDGE_ADDR if self.cluster else '127.0.0.1'}:{port}")
                    while True:
                        self._serve(router)
                        if self._recover_live(mp):
                            continue
                        self.coordinator.refuse_live()
                        self._serve(router)  # a failure not recovered live: its abort settles as always
                        self._stop_ranks()
                        extra = self._next_generation()
                        if extra is None:
                            break
                        self._start_ranks(mp, extra)
                finally:
                    ctx.destroy(linger=0)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self._stop_ranks()
            if self.cluster is not None:
                for error in self.cluster.destroy():
                    print(f"warning: {error}", file=sys.stderr)
        outcome = self.coordinator.outcome(interrupted)
        return self.supervisor.outcome(outcome) if self.supervisor else outcome

    def _start_ranks(self, mp, extra_env: dict, ranks: list[int] | None = None) -> None:
        """Fork (or spawn) the current generation's ranks (`ranks`: only these, beside the survivors
        of a live recovery) in their own scratch directories; `extra_env` tells them more (the
        checkpoint to go on from). With live recovery the next generation's directories are made
        too, so that survivors can re-form the moment a peer fails."""
        self.ipc_dir = ipc_dir(self.port, self.generation)
        for generation in (self.generation, self.generation + 1) if self.live else (self.generation,):
            self._claim_scratch(generation)
        cpus = rank_cpus(self.scenario)
        if ranks is None:
            self.procs = [None] * self.n
        # Hold Ctrl-C while forking: a child must not see it before it has set its own handlers.
        with interrupts.held(), self._without_main():
            for rank in range(self.n) if ranks is None else ranks:
                p = mp.Process(
                    target=child_main,
                    args=(
                        self.scenario,
                        self.run_dir,
                        {**self._env(rank, self.port), **extra_env},
                        os.getpid(),
                        cpus[rank] if cpus else None,
                    ),
                    name=f"rank-{rank}",
                )
                p.start()
                self.procs[rank] = p
        for rank, p in enumerate(self.procs):
            self.coordinator.pids[rank] = p.pid
        if self.supervisor is not None:
            self.supervisor.arm(self.coordinator, self.generation)

    def _claim_scratch(self, generation: int) -> None:
        """The ipc sockets' directory of `generation` (and its /dev/shm one), once."""
        dirs = [ipc_dir(self.port, generation)]
        if BY_NAME[self.scenario.transport].uses_shm:
            dirs.append(shm_dir_for(self.port, generation))
        for d in dirs:
            if d not in self.scratch:
                scratch.claim(d)
                self.scratch.append(d)

    def _serve(self, router) -> None:
        sentinels = {
            p.sentinel: functools.partial(self._on_exit, rank)
            for rank, p in enumerate(self.procs)
            if rank not in self.coordinator.exited
        }
        with self.interrupts.armed_here():
            self.coordinator.serve(router, watch=sentinels)

    def _stop_ranks(self) -> None:
        """The current generation's ranks killed and reaped, their scratch removed (once)."""
        if not self.procs:
            return
        self._kill_all()
        self._record_fired_fault()
        self._remove_empty_stacks()
        self._cleanup_scratch()
        self.procs = []

    def _next_generation(self) -> dict | None:
        """Ask the supervisor whether to start the group again (not after Ctrl-C); if so, the next
        generation's coordinator and what its ranks are told."""
        if self.supervisor is None or self.interrupts.pending:
            return None
        extra = self.supervisor.after_generation(self.generation, self.coordinator, self.cluster)
        if extra is None:
            return None
        self.generation += 1
        self.coordinator = self._coordinator()
        return extra

    @contextlib.contextmanager
    def _without_main(self):
        """While ranks are spawned, an empty `__main__`. A spawned child first re-runs its parent's
        `__main__` (multiprocessing's rule, so that what was defined there can be unpickled), which
        would run a script's top level again, or fail for `python -` or a notebook's kernel. Our
        ranks need none of it: a node is imported by name and a rank function comes by value. Swapped
        only while the processes start, in the launcher's thread."""
        if self.start_method == "fork":
            yield
            return
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main

    def _context(self):
        if self.start_method == "fork":
            return multiprocessing.get_context("fork")
        import multiprocess  # dill pickles what a spawned rank needs, functions from __main__ too

        return multiprocess.get_context(self.start_method)

    def _build_cluster(self, hosts: int) -> None:
        self.cluster = netns.Cluster(hosts, self.scenario.link)
        self.cluster.create()
        fault = self.scenario.fault
        if fault is not None and fault.is_host_action:  # armed for the first generation only: one event
            HostDrill(fault, self.scenario.placement, self.cluster, self.coordinator).arm()

    def _on_exit(self, rank: int) -> None:
        """A rank's process ended: fine if it reported done (exit 0) or its error; otherwise a failure."""
        coord = self.coordinator
        proc = self.procs[rank]
        proc.join(1.0)
        coord.exited.add(rank)
        code = proc.exitcode
        reported = rank in coord.reported or (code is not None and code >= 0 and coord.await_report(rank))
        if reported and (code == 0 or coord.results[rank] is None):
            return  # reported done (exit 0) or already reported its error
        if code is not None and code < 0:
            message = f"killed by {_signal_name(code)}"
            kind = "signal"
        else:
            message = f"exited with status {code} before finishing"
            kind = "exit"
        note = coord.host_notes.get(coord.hosts.get(rank, ""))
        if note:
            message += f" ({note})"
        coord.fail(
            RankFailure(
                rank,
                coord.elapsed_s(),
                kind,
                message,
                pid=coord.pids.get(rank),
                host=coord.hosts.get(rank, ""),
            )
        )

    # -- teardown --------------------------------------------------------------------------
    def _kill_all(self) -> None:
        coord = self.coordinator
        deadline = time.monotonic() + LOG_FLUSH_GRACE_S
        for rank, p in enumerate(self.procs):  # a rank that reported is writing its log: let it finish
            if rank in coord.reported:
                p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.exitcode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for rank, p in enumerate(self.procs):
            p.join(5.0)
            if rank not in coord.exited and p.exitcode is not None:
                coord.exited.add(rank)
                if rank not in coord.reported and not any(f.rank == rank for f in coord.failures):
                    coord.failures.append(
                        RankFailure(
                            rank,
                            coord.elapsed_s(),
                            "signal",
                            "killed by the launcher after the run was aborted",
                            pid=p.pid,
                            secondary=True,
                        )
                    )

    def _record_fired_fault(self) -> None:
        """The rank fault's firing (worker.FAULT_FIRED_FILE), as one of result.json's events."""
        path = self.run_dir / FAULT_FIRED_FILE
        try:
            fired = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            return
        coord = self.coordinator
        coord.events.append(
            {
                "at_s": round(fired["monotonic_s"] - coord.t0, 3),
                "host": fired.get("host", ""),
                "rank": fired["rank"],
                "event": f"fault {fired['action']} fired on rank {fired['rank']} (its post {fired['post']})",
            }
        )
        coord.events.sort(key=lambda e: e["at_s"])

    def _remove_empty_stacks(self) -> None:
        """A SIGKILLed rank cannot remove its unused stack file itself (worker.run_rank does otherwise)."""
        for path in self.run_dir.glob("rank-*.stack"):
            try:
                if path.stat().st_size == 0:
                    path.unlink()
            except OSError:
                pass

    def _cleanup_scratch(self) -> None:
        """Every claimed scratch directory removed: the ipc sockets' and /dev/shm's of each generation."""
        for d in self.scratch:
            if d.startswith("/dev/shm/"):
                shutil.rmtree(d, ignore_errors=True)
            else:
                self._cleanup_ipc(d)
        self.scratch = []

    @staticmethod
    def _cleanup_ipc(d: str) -> None:
        if d and os.path.isdir(d):
            for name in os.listdir(d):
                if (name.startswith("rank-") and name.endswith(".sock")) or name == scratch.OWNER_FILE:
                    try:
                        os.unlink(os.path.join(d, name))
                    except OSError:
                        pass
            try:
                os.rmdir(d)
            except OSError:
                pass
