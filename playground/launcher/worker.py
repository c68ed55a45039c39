"""What every rank process runs: join, build the communicator, call the node, report back.

The same code runs under our launcher (forked, environment set) and under any other launcher that
sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (`python -m playground node SCENARIO`).
"""

import faulthandler
import importlib
import json
import os
import signal
import sys
import time
import traceback
import types
from pathlib import Path

import zmq

from playground.comm.communicator import Communicator
from playground.comm.control import LauncherLink
from playground.comm.delay import DelayedTransport
from playground.comm.faults import FaultyTransport
from playground.comm.slowdown import Slowdown
from playground.config.scenario import Scenario, node_function
from playground.core import interrupts
from playground.core.errors import CommTimeout, PeerLost, ScenarioMismatch
from playground.core.machine import keep_freed_memory
from playground.core.topology import host_name
from playground.hosts import netns
from playground.launcher.membership import LIVE_VARIABLE, REPLACEMENT_VARIABLE, Membership
from playground.rendezvous import join as rendezvous
from playground.tracing import clocks
from playground.tracing.trace import CAT_META, Tracer

RELEASE_TIMEOUT_S = 60.0  # waiting for the slowest rank to finish, after this rank is done
FAULT_FIRED_FILE = "fault-fired.json"  # when a drill fired, written by its rank just before
_PR_SET_NAME, _PR_SET_PDEATHSIG = 15, 1


def _error_message(rank: int, exc: BaseException, generation: int = 0) -> dict:
    msg = {
        "type": "error",
        "rank": rank,
        "generation": generation,
        "error_type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }
    if isinstance(exc, (CommTimeout, PeerLost)) and exc.peer is not None:
        msg["waiting_for"] = exc.peer
    if isinstance(exc, (PeerLost, ScenarioMismatch)):  # the coordinator already has the root cause
        msg["secondary"] = True
    return msg


def run_rank(scenario: Scenario, run_dir: Path, env: rendezvous.RankEnv) -> int:
    """Run this rank to the end; returns the process exit status (0 ok, 1 failed)."""
    keep_freed_memory()
    stack_file = open(run_dir / f"rank-{env.rank}.stack", "w")  # noqa: SIM115 - lives as long as the process
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    ctx = zmq.Context()
    member = Membership(
        ctx,
        env,
        heartbeat=bool(scenario.hosts),
        is_replacement=os.environ.get(REPLACEMENT_VARIABLE) == "1",
        way=scenario.recovery.way,
    )
    tracer = Tracer(env.rank, run_dir / f"rank-{env.rank}.jsonl")
    comm = None
    try:
        comm, faulty = _connect(scenario, run_dir, member, tracer)
        comm.barrier()
        result = node_function(scenario)(comm, scenario.params)
        tracer.flush()
        result = _as_reported(result, comm, faulty)
        done = {"type": "done", "rank": member.env.rank, "result": result, "generation": member.generation}
        rendezvous.send_ctrl(member.ctrl, done)
        rendezvous.recv_ctrl(member.ctrl, "release", max(RELEASE_TIMEOUT_S, scenario.timeout_s), env.rank)
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
        try:  # first: the launcher's report must not wait for a long log to be written
            rendezvous.send_ctrl(member.ctrl, _error_message(member.env.rank, exc, member.generation))
        except zmq.ZMQError:
            pass
        tracer.add(
            "error", "error", tracer.now_us(), 0.0, {"type": type(exc).__name__, "message": str(exc)[:500]}
        )
        tracer.flush()
        return 1
    finally:
        if comm is not None:
            comm.close()
        member.close()
        ctx.term()
        faulthandler.unregister(signal.SIGUSR1)
        stack_file.close()
        stack_path = run_dir / f"rank-{env.rank}.stack"
        if stack_path.exists() and stack_path.stat().st_size == 0:
            stack_path.unlink()


def _connect(
    scenario: Scenario, run_dir: Path, member: Membership, tracer: Tracer
) -> tuple[Communicator, FaultyTransport | None]:
    """Join the run (`_join`), wrap the transport in the run's drill, and build the communicator;
    also the drill's wrapper, when this rank's posts trigger it. With `recovery.way: peer` the
    communicator can re-form its group (`comm.live`, the rank's `Membership`)."""
    tracer.clock_ns = clocks.rank_clock_ns(member.env.rank)  # skewed on purpose in drills

    def connect(env: rendezvous.RankEnv, ctrl: zmq.Socket) -> tuple:
        transport, hosts = _join(scenario, env, ctx, ctrl, tracer)
        return transport, LauncherLink(ctrl, env.rank, env.generation), hosts

    ctx, env = member.ctx, member.env
    transport, hosts = _join(scenario, env, ctx, member.ctrl, tracer)
    faulty = _with_fault(transport, scenario, run_dir, env, member.ctrl, tracer)
    comm = Communicator(
        env.rank,
        env.world_size,
        faulty or transport,
        tracer=tracer,
        timeout_s=scenario.timeout_s,
        control=LauncherLink(member.ctrl, env.rank, env.generation),
        run_dir=run_dir,
        hosts=hosts,
    )
    if scenario.recovery.way in ("peer", "shrink") and os.environ.get(LIVE_VARIABLE) == "1":
        member.comm, member.connect = comm, connect
        comm.live = member
    return comm, faulty


def _join(scenario: Scenario, env: rendezvous.RankEnv, ctx: zmq.Context, ctrl: zmq.Socket, tracer: Tracer):
    """Open the transport's end, register, get the table and this rank's clock offset, connect to
    the peers and wrap the transport in the run's link delay: (transport, each rank's host)."""
    end = rendezvous.open_end(scenario.transport, env, ctx, hosts=bool(scenario.hosts))
    try:
        peers, clock = rendezvous.join(
            ctrl,
            env,
            end.endpoint,
            max(30.0, scenario.timeout_s),
            scenario.to_dict(),
            tracer.clock_ns,
            end.local_endpoint,
        )
        # Raw times stay in the log, the offset beside them: `inspect` shifts them onto rank 0's clock.
        if clock is not None:
            tracer.add("clock", CAT_META, tracer.now_us(), 0.0, {**clock.to_args(), "endpoint": end.endpoint})
        endpoints = rendezvous.pick_endpoints(peers, env.rank)
        transport = end.connect(endpoints)  # the transport owns the end from here
    except BaseException:
        end.close()
        raise
    return _with_delay(transport, scenario, env, ctx, endpoints, peers.hosts), peers.hosts


def _with_fault(
    transport, scenario: Scenario, run_dir: Path, env: rendezvous.RankEnv, ctrl: zmq.Socket, tracer: Tracer
):
    """The scenario's drill around `transport` when this rank's posts trigger it, else None (the
    slow drill also stretches the rank's compute spans, through its tracer). A drill is one event:
    a restarted group (generation > 0) runs without it."""
    fault = scenario.fault
    if fault is None or env.generation > 0 or fault.counting_rank(scenario.placement) != env.rank:
        return None

    def request(action: str) -> None:
        rendezvous.send_ctrl(ctrl, {"type": "fault", "rank": env.rank, "action": action})

    on_fire = None if fault.is_host_action else _fired_recorder(run_dir, env)  # hosts: drills.py records
    slowdown = Slowdown(fault.factor) if fault.action == "slow" and fault.factor else None
    if slowdown is not None:
        tracer.span = slowdown.stretch_spans(tracer.span)
    return FaultyTransport(transport, env.rank, fault.action, fault.after_ops, request, on_fire, slowdown)


def _as_reported(result, comm: Communicator, faulty: FaultyTransport | None) -> dict:
    """What the node returned as the `done` message's result: a dict (None: {}, another value
    under "value"), with the bytes this rank moved and, when its drill never fired, that it did not."""
    if result is None:
        result = {}
    if not isinstance(result, dict):
        result = {"value": result}
    result.setdefault("bytes_sent", comm.bytes_sent)
    result.setdefault("bytes_received", comm.bytes_received)
    if faulty is not None and faulty.armed:  # the drill never fired: the report says so
        result["fault_unfired"] = {"num_posts": faulty.num_ops}
    return result


def _fired_recorder(run_dir: Path, env: rendezvous.RankEnv):
    """The drill's `on_fire`: FAULT_FIRED_FILE in the run directory, written once, whole (a
    rename), before the fault acts: the launcher adds it to result.json's events, so the time from
    a drill to its first error can be read, also when the rank killed itself."""
    fired: list[str] = []

    def record(action: str, post: int) -> None:
        if fired:
            return
        fired.append(action)
        record = {
            "rank": env.rank,
            "host": os.environ.get("PLAYGROUND_HOST", ""),
            "action": action,
            "post": post,
            "monotonic_s": time.monotonic(),
        }
        tmp = run_dir / f".{FAULT_FIRED_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, run_dir / FAULT_FIRED_FILE)

    return record


def _with_delay(
    transport, scenario: Scenario, env: rendezvous.RankEnv, ctx, endpoints: list[str], hosts: list[str]
):
    """`transport` behind a DelayedTransport when messages between hosts are delayed (the link's
    delay, or a delay_link drill: one event, so not in a restarted group); else itself."""
    link_delay_s = scenario.link.delay if scenario.link else 0.0
    fault, extra = scenario.fault, None
    if fault is not None and fault.action == "delay_link" and fault.delay is not None and env.generation == 0:
        host = host_name(fault.target_host(scenario.placement))
        extra = (host, fault.delay, time.monotonic() + (fault.after_s or 0.0))
    if not scenario.hosts or (not link_delay_s and extra is None):
        return transport
    return DelayedTransport(transport, env.rank, ctx, endpoints, hosts, link_delay_s, extra)


def child_main(scenario: Scenario, run_dir: Path, environ: dict, launcher_pid: int, cpu: int | None) -> None:
    """Entry point of a rank the launcher forked or spawned: set up the process, run, and exit
    without the parent's atexit.

    On an emulated host it first enters the host's network namespace, before any ZeroMQ context
    exists, so that ZeroMQ's I/O threads are born inside it; pinned to `cpu` (launch.rank_cpus)
    before any thread starts, so that they are all pinned with it."""
    _die_with_parent(launcher_pid)  # first: a launcher killed while this rank starts must not leave it behind
    _name_process(f"pg-rank-{environ.get('RANK', '?')}")
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # the CPU went away (hotplug, a cpuset changed): run unpinned
            pass
    if environ.get("PLAYGROUND_NETNS"):
        try:
            netns.enter(environ["PLAYGROUND_NETNS"])
        except OSError as e:
            print(
                f"rank {environ.get('RANK')}: cannot enter {environ['PLAYGROUND_NETNS']}: {e}",
                file=sys.stderr,
            )
            os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.INTERRUPTS)  # held by the launcher
    os.environ.update(environ)
    code = 1
    try:
        code = run_rank(scenario, run_dir, rendezvous.RankEnv.from_environ())
    finally:
        os._exit(code)


def _die_with_parent(launcher_pid: int) -> None:
    """Ask Linux to SIGKILL this process if the launcher dies, so no rank outlives it; and exit now
    if it already died between the fork and this call (the request would then never fire)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() != launcher_pid:
        os._exit(1)


def _name_process(name: str) -> None:
    """Name this process `name` (its comm, at most 15 bytes: what ps, top and psutil's name() show),
    so a rank can be told from its launcher and its peers from outside (the chaos command finds
    ranks by it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except OSError:
        pass


class FunctionByValue:
    """A rank function sent to spawned ranks by value (`playground.api.launch`).

    A spawned rank imports nothing of the caller's `__main__` (a notebook's cells, a script), so a
    function defined there, a lambda or a closure cannot be found by name. dill pickles it here with
    the globals it uses (modules by name, the rest by value); the rank unpickles it when it is
    called, inside `run_rank`, so a failure to rebuild it (a module the rank cannot import) is that
    rank's error, reported like any other. Pickled once, in the caller, so that what cannot be
    pickled (an open socket in the closure) is one line before any process starts."""

    def __init__(self, function):
        import io

        import dill

        class ModulesByName(dill.Pickler):
            """dill pickles a module outside site-packages (an editable install, a checkout on
            PYTHONPATH) with its whole namespace; ours and the nodes' go by name, as the rank has them."""

            def reducer_override(self, obj):
                if isinstance(obj, types.ModuleType) and obj.__name__.partition(".")[0] in (
                    "playground",
                    "nodes",
                ):
                    return importlib.import_module, (obj.__name__,)
                return NotImplemented

        buffer = io.BytesIO()
        ModulesByName(buffer, recurse=True).dump(function)
        self.payload = buffer.getvalue()

    def __call__(self, comm, params):
        import dill

        return dill.loads(self.payload)(comm, params)
