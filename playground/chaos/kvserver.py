"""The chaos command's `kvserver` workload: the standalone KV server (`python -m
playground.kvcache.server --random-model`) and client processes (`kvclient.py`), each in a
session of its own, generate requests in flight when the fault comes:

- client killed: SIGKILL to one client; the others must finish, and the server must free the
  killed one's requests and blocks once its lease has run out (asked with `stats`);
- server killed: SIGKILL to the server; every client must fail within its timeout (no reply);
- server restarted: SIGKILL, and a new server on the same address; every client must fail its
  lost requests within its timeout, saying that the server restarted.
The server left at the end is stopped with SIGINT, which it must answer with exit 0.

Under `chaos --recover` (server restarted) the servers keep a journal of their answers, and the
clients re-send what the restart lost and check every reply against dense generation: every client
must finish, each id answered once (the journal must not hold an id twice), the tokens a fault-free
server gives.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from playground.chaos.kinds import ChaosRun, Observation
from playground.chaos.launched import POLL_S, kill_session
from playground.comm.addresses import free_tcp_port
from playground.core.child import subprocess_env
from playground.core.errors import PlaygroundError
from playground.kvcache.server.client import KVClient

LEASE_S = 1.5
MAX_NEW_TOKENS = 900  # with the model below, 2-3 clients' requests take about 3 s: in flight at the fault
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 10.0
VERIFY_S = 20.0  # recovering: time a client may take to check its replies against dense generation
SERVER = ["-m", "playground.kvcache.server", "--random-model", "--layers", "2", "--heads", "4",
          "--d-model", "64", "--context", "1024", "--capacity-tokens", "40000", "--lease-s", str(LEASE_S)]  # fmt: skip


def _spawn(argv: list[str], out_dir: Path, name: str) -> subprocess.Popen:
    with open(out_dir / f"{name}.out", "wb") as out, open(out_dir / f"{name}.err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-P", *argv],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=subprocess_env(),
            start_new_session=True,
        )


def _wait_for_line(proc: subprocess.Popen, path: Path, word: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if word in path.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(POLL_S)
    return False


def start_server(
    address: str, out_dir: Path, name: str, journal: Path | None = None
) -> subprocess.Popen | None:
    """A server bound to `address` (keeping its answers in `journal`), once it says so; None if it
    did not start."""
    kept = ["--journal", str(journal)] if journal is not None else []
    proc = _spawn([*SERVER, "--bind", address, *kept], out_dir, name)
    if _wait_for_line(proc, out_dir / f"{name}.out", "serving", time.monotonic() + START_DEADLINE_S):
        return proc
    kill_session(proc.pid)
    proc.wait(5)
    return None


def execute(run: ChaosRun, out_dir: Path) -> Observation:
    out_dir.mkdir(parents=True, exist_ok=True)
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    obs = Observation(ports={int(address.rsplit(":", 1)[1])})
    journal = out_dir / "answers.jsonl" if run.recover else None
    first = start_server(address, out_dir, "server-1", journal)
    if first is None:
        obs.notes.append("the server did not start")
        return obs
    servers: list[subprocess.Popen] = [first]
    clients: list[subprocess.Popen] = []
    try:
        obs.sessions.append(first.pid)
        for k in range(1, run.ranks + 1):
            argv = ["-m", "playground.chaos.kvclient", "--address", address, "--name", f"client-{k}",
                    "--requests", run.size.split()[0], "--max-new-tokens", str(MAX_NEW_TOKENS),
                    "--timeout-s", f"{run.timeout_s:g}"]  # fmt: skip
            argv += ["--resends", "3", "--verify"] if run.recover else []
            clients.append(_spawn(argv, out_dir, f"client-{k}"))
            obs.sessions.append(clients[-1].pid)
        deadline = time.monotonic() + START_DEADLINE_S
        if not all(
            _wait_for_line(c, out_dir / f"client-{k + 1}.out", "submitted", deadline)
            for k, c in enumerate(clients)
        ):
            obs.notes.append("a client did not submit its requests")
        time.sleep(run.after_s)  # the fault's moment: requests in flight
        watched = clients[max(run.rank or 0, 1) - 1]  # the client to be killed, or the first one
        if all(c.poll() is not None for c in clients) or watched.poll() is not None:
            obs.fired = False  # the requests were answered before the fault's moment
            obs.notes.append(f"every request was answered before {run.after_s:.2f}s")
        else:
            obs.fault_at = _fire(run, address, servers, clients, out_dir, obs, journal)
        _wait_clients(run, clients, obs)
        if run.fault.target == "client":
            obs.kv_freed = _freed_after_lease(address, run.timeout_s)
        obs.exit_code, obs.exited_at = _stop(servers[-1])
    finally:
        for p in [*servers, *clients]:
            if p.poll() is None:
                kill_session(p.pid)
                p.wait(5)
        for c in obs.clients:  # filled by _wait_clients (empty if the workload never started)
            c["stderr"] = (out_dir / f"client-{c['client']}.err").read_text(errors="replace")[-2000:]
            c["stdout"] = (out_dir / f"client-{c['client']}.out").read_text(errors="replace")[-4000:]
        if journal is not None:
            obs.journal_twice = answered_twice(journal)
        obs.stderr = "\n".join(
            f"client {k + 1}: {c['stderr'].strip()}" for k, c in enumerate(obs.clients) if c["stderr"].strip()
        )
    return obs


def _fire(
    run: ChaosRun,
    address: str,
    servers: list[subprocess.Popen],
    clients: list[subprocess.Popen],
    out_dir: Path,
    obs: Observation,
    journal: Path | None = None,
) -> float:
    at = time.monotonic()
    if run.fault.target == "client":
        clients[(run.rank or 1) - 1].send_signal(signal.SIGKILL)
        return at
    servers[0].send_signal(signal.SIGKILL)
    servers[0].wait(5)
    if run.fault.restarts:
        restarted = start_server(address, out_dir, "server-2", journal)
        if restarted is None:
            obs.notes.append("the restarted server did not start")
        else:
            servers.append(restarted)
            obs.sessions.append(restarted.pid)
            obs.notes.append(f"restarted server up {time.monotonic() - at:.2f}s after the kill")
    return at


def _wait_clients(run: ChaosRun, clients: list[subprocess.Popen], obs: Observation) -> None:
    """Each client's exit status and when it ended (a client still running at the deadline: None)."""
    deadline = (obs.fault_at or time.monotonic()) + run.timeout_s + 15.0 + (VERIFY_S if run.recover else 0.0)
    ended: dict[int, float] = {}
    while len(ended) < len(clients) and time.monotonic() < deadline:
        for k, c in enumerate(clients):
            if k not in ended and c.poll() is not None:
                ended[k] = time.monotonic()
        time.sleep(POLL_S)
    for k, c in enumerate(clients):
        obs.clients.append({"client": k + 1, "exit": c.poll(), "exited_at": ended.get(k), "stderr": ""})


def _freed_after_lease(address: str, timeout_s: float) -> bool:
    """Whether the server holds nothing once the killed client's lease has run out (the survivors
    have finished by now): no requests, no live sequences, no allocated slots."""
    client = KVClient(address, timeout_s=timeout_s)
    try:
        deadline = time.monotonic() + LEASE_S + 5.0
        while time.monotonic() < deadline:
            stats, _ = client.check("stats")
            engine = stats.get("engine") or {}
            if stats["live_seqs"] == 0 and stats["allocated_slots"] == 0 and engine.get("requests") == 0:
                return True
            time.sleep(0.1)
        return False
    except PlaygroundError:
        return False
    finally:
        client.close()


def _stop(server: subprocess.Popen) -> tuple[int | None, float]:
    """SIGINT, as Ctrl-C: the server must end with status 0."""
    server.send_signal(signal.SIGINT)
    try:
        code = server.wait(STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic()


def answered_twice(journal: Path) -> int:
    """Ids the journal holds more than one answer for: each a second generation. A restarted
    server rewrites the journal with one answer an id and appends after it, so an id its
    predecessor answered and it generated again is there twice."""
    seen: dict[tuple, int] = {}
    for line in journal.read_bytes().splitlines() if journal.exists() else []:
        try:
            entry = json.loads(line)
            key = (entry["client"], entry["id"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line
        seen[key] = seen.get(key, 0) + 1
    return sum(n - 1 for n in seen.values() if n > 1)
