"""One rank of a run started by another launcher: `python -m playground node SCENARIO`.

torchrun, mpiexec, srun or a shell loop starts the processes; each learns its rank from the
environment (`rendezvous.RankEnv`). Every process validates the scenario itself (bad input: exit 2,
one line, before any socket exists). Rank 0 also hosts the `Coordinator` in a thread, bound to
MASTER_ADDR's interface at the coordinator port, and once every rank has finished it writes the
same summary, `result.json` and `<out>/latest` that `run` writes. The data plane is always tcp:
the ranks may be on several hosts, and nothing here can tell.

Without our own launcher there are no process sentinels: a rank that dies silently is found by its
peers' receive timeouts (`timeout_s`), and usually sooner by the other launcher, which kills the
remaining ranks itself when one exits with an error.
"""

import errno
import json
import os
import signal
import socket
import sys
import threading
import traceback
from dataclasses import replace
from pathlib import Path

import yaml
import zmq

from playground.comm.addresses import is_loopback
from playground.config.scenario import Scenario, load_scenario
from playground.core.errors import PeerLost, ScenarioError
from playground.core.rundir import EXIT_FAILED, EXIT_OK, point_latest, write_result
from playground.display.report import make_console
from playground.launcher.run import print_outcome, result_dict, summarize
from playground.launcher.worker import run_rank
from playground.rendezvous import join as rendezvous
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.failures import ABORT_GRACE_S, STACK_WAIT_S, RankFailure

BIND_WAIT_S = 10.0  # how long rank 0 waits for its coordinator thread to bind
FLUSH_LINGER_MS = 2000  # the coordinator's last messages (release, abort) still go out after it closes


# Linux's default net.ipv4.ip_local_port_range: outgoing connections take even ports from it (and
# bind(0) odd ones), so torchrun --standalone's random MASTER_PORT is odd and MASTER_PORT + 1 is the
# kind of port its own store clients are given. A constant, not this host's setting: every rank,
# on every host, must compute the same port without talking.
EPHEMERAL_PORTS = range(32768, 61000)


def coordinator_port(environ, master_port: int) -> int:
    """PLAYGROUND_COORD_PORT if set; under torchrun (TORCHELASTIC_RUN_ID is set) MASTER_PORT + 1,
    because torchrun's own TCPStore already listens on MASTER_PORT, moved below the ephemeral range
    if it falls inside it (where a connection to that store may already hold it); otherwise MASTER_PORT."""
    override = environ.get("PLAYGROUND_COORD_PORT", "")
    if override:
        if not override.isdigit() or not 0 < int(override) < 65536:
            raise ScenarioError(f"PLAYGROUND_COORD_PORT: expected a port number 1-65535, got {override!r}")
        return int(override)
    under_torchrun = bool(environ.get("TORCHELASTIC_RUN_ID"))
    port = master_port + 1 if under_torchrun else master_port
    if under_torchrun and port in EPHEMERAL_PORTS:
        port -= len(EPHEMERAL_PORTS)  # 32768..60999 -> 4536..32767: same offset, below the range
    if not 0 < port < 65536:
        rule = "MASTER_PORT + 1 under torchrun" if under_torchrun else "MASTER_PORT"
        raise ScenarioError(
            f"coordinator port {port} ({rule}) is not a port number 1-65535; set PLAYGROUND_COORD_PORT"
        )
    return port


def coordinator_endpoint(master_addr: str, port: int) -> str:
    """Where rank 0 binds: MASTER_ADDR's interface. A host name that resolves to a loopback address
    here (Debian's `127.0.1.1 myhost`) but that other hosts use to reach us binds every interface."""
    try:
        ip = socket.gethostbyname(master_addr)
    except OSError:
        raise ScenarioError(f"MASTER_ADDR {master_addr!r}: cannot resolve this host name") from None
    if ip.startswith("127.") and not is_loopback(master_addr):
        ip = "*"
    return f"tcp://{ip}:{port}"


def run_dir_for(out: Path, name: str, port: int, environ) -> Path:
    """The same directory for every rank of one run without talking: PLAYGROUND_RUN_DIR, or
    <out>/<name>-<coordinator port> (one coordinator port is one run at a time)."""
    return Path(environ.get("PLAYGROUND_RUN_DIR") or out / f"{name}-{port}")


def read_rank_env(environ) -> rendezvous.RankEnv:
    try:
        return rendezvous.RankEnv.from_environ(environ)
    except ValueError as e:
        if "invalid literal" in str(e):  # int() does not say which variable it was
            raise ScenarioError(
                f"environment: RANK, WORLD_SIZE and MASTER_PORT (or their PMI_*, OMPI_COMM_WORLD_*, "
                f"SLURM_* aliases) must be integers ({e})"
            ) from None
        raise ScenarioError(f"environment: {e}") from None


class CoordinatorThread(threading.Thread):
    """Rank 0's coordinator: its own ZeroMQ context and ROUTER, created inside the thread that uses them."""

    def __init__(self, coordinator: Coordinator, endpoint: str):
        super().__init__(name="playground-coordinator", daemon=True)  # never keeps a dying rank alive
        self.coordinator, self.endpoint = coordinator, endpoint
        self.bound = threading.Event()
        self.stop = threading.Event()
        self.error = ""
        self.bind_error = ""  # the port is taken, or the address is not this host's: bad input

    def run(self) -> None:
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, FLUSH_LINGER_MS)
        try:
            try:
                router.bind(self.endpoint)
            except zmq.ZMQError as e:
                port = self.endpoint.rsplit(":", 1)[1]
                why = (
                    f"another process holds port {port} (another run with the same MASTER_PORT?)"
                    if e.errno == errno.EADDRINUSE
                    else "is MASTER_ADDR an address of the host where rank 0 runs?"
                )
                self.bind_error = (
                    f"rank 0: cannot listen for the coordinator on {self.endpoint}: {e.strerror}: {why}; choose "
                    f"another MASTER_PORT or set PLAYGROUND_COORD_PORT (docs/external-launchers.md)"
                )
                return
            finally:
                self.bound.set()
            try:
                self.coordinator.serve(router, stop=self.stop)
            except Exception as e:  # noqa: BLE001 - a coordinator bug must abort the ranks, not strand them
                self.error = traceback.format_exc()
                self.coordinator.fail(
                    RankFailure(
                        0,
                        self.coordinator.elapsed_s(),
                        "error",
                        f"the coordinator crashed: {type(e).__name__}: {e}",
                    )
                )
        finally:
            router.close()
            ctx.term()  # waits up to FLUSH_LINGER_MS for release/abort messages to leave


def _run_rank_reporting_sigterm(scenario: Scenario, run_dir: Path, env: rendezvous.RankEnv) -> int:
    def terminated(signum, frame):
        # torchrun (and srun) stop the other ranks with SIGTERM when one fails: report it as a
        # consequence (PeerLost is secondary), so rank 0 can still write the root cause.
        raise PeerLost(
            env.rank,
            f"terminated by {signal.Signals(signum).name} (the launcher is stopping the run, "
            f"usually because another rank failed)",
        )

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        return run_rank(scenario, run_dir, env)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _last_error(run_dir: Path, rank: int) -> str:
    """The error this rank recorded in its own log (worker.run_rank writes it before reporting)."""
    try:
        lines = (run_dir / f"rank-{rank}.jsonl").read_text().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        if event.get("name") == "error":
            args = event.get("args", {})
            return f"{args.get('type', 'Error')}: {args.get('message', '')}".splitlines()[0]
    return ""


def run_external(scenario_arg: str, overrides: list[str], out: Path) -> int:
    """This process's part of the run; returns its exit status (0 ok, 1 failed; bad input raises
    ScenarioError, which the CLI turns into one line and status 2)."""
    env = read_rank_env(os.environ)
    scenario = load_scenario(
        scenario_arg, ranks=env.world_size, transport="tcp", overrides=overrides, said={"ranks": "WORLD_SIZE"}
    )
    if scenario.hosts:
        raise ScenarioError(
            f"{scenario.source}: key 'hosts': emulated hosts are built by `run --hosts`; under another "
            f"launcher the hosts are its own (set PLAYGROUND_HOST per host if they share a host name)"
        )
    port = coordinator_port(os.environ, env.master_port)
    endpoint = coordinator_endpoint(env.master_addr, port)
    rank_env = replace(env, master_port=port)  # ranks connect to the coordinator, not to torchrun's store
    run_dir = run_dir_for(out, scenario.name, port, os.environ)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in (f"rank-{env.rank}.jsonl", f"rank-{env.rank}.stack"):  # the tracer appends
        (run_dir / stale).unlink(missing_ok=True)
    if env.rank != 0:
        code = _run_rank_reporting_sigterm(scenario, run_dir, rank_env)
        if code != EXIT_OK:
            print(
                f"rank {env.rank}: failed: {_last_error(run_dir, env.rank) or 'see its log'} "
                f"(rank 0 reports the root cause; log {run_dir / f'rank-{env.rank}.jsonl'})",
                file=sys.stderr,
            )
        return code
    return _run_rank0(scenario, run_dir, rank_env, endpoint, out)


def _run_rank0(scenario: Scenario, run_dir: Path, env: rendezvous.RankEnv, endpoint: str, out: Path) -> int:
    """Host the coordinator, run rank 0's own part, then summarize exactly as `run` does."""
    console, err = make_console(), make_console(stderr=True)
    (run_dir / "result.json").unlink(missing_ok=True)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario.to_dict(), sort_keys=False))
    coordinator = Coordinator(scenario.ranks, scenario.timeout_s, run_dir, watch_exits=False)
    thread = CoordinatorThread(coordinator, endpoint)
    thread.start()
    try:
        if thread.bound.wait(BIND_WAIT_S) and thread.bind_error:
            raise ScenarioError(thread.bind_error)  # one line, exit 2: the user's port choice is the fix
        if not thread.bound.is_set() or thread.error:
            err.print(
                thread.error or f"rank 0: the coordinator did not start within {BIND_WAIT_S:.0f}s",
                highlight=False,
                markup=False,
            )
            return EXIT_FAILED
        console.print(
            f"[bold]{scenario.name}[/bold]: {scenario.ranks} ranks over tcp (external launcher), "
            f"node {scenario.node}, coordinator {endpoint} -> {run_dir}",
            highlight=False,
        )
        _run_rank_reporting_sigterm(scenario, run_dir, env)
        # Rank 0's own part has ended, so it has reported done-and-released or an error (which starts
        # the abort): the coordinator only has the abort grace and stack dumps left.
        thread.join(ABORT_GRACE_S + STACK_WAIT_S * scenario.ranks + 5.0)
    finally:
        thread.stop.set()
        thread.join(FLUSH_LINGER_MS / 1000 + 1.0)
    if thread.error:
        err.print(thread.error, highlight=False, markup=False)
    outcome = coordinator.outcome()
    report = summarize(scenario, outcome, run_dir)
    result = result_dict(scenario, outcome, report, run_dir)
    write_result(run_dir, result)
    point_latest(out, run_dir)
    print_outcome(outcome, report, run_dir, console, err)
    return EXIT_OK if result["ok"] else EXIT_FAILED
