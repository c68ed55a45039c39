"""Rank 0's side of both KV-cache labs (nodes/kvcache.py, nodes/serving.py): the server on a
thread of its own, one fresh server per policy, and the wait for every client's result of it;
and the client ranks' KVClient (`rank_client`), which answers the launcher's abort while it waits.

The ROUTER socket belongs to the server thread (created there, never touched by another), so
the main thread stays free for the communicator and the progress bar; the server object is
swapped between policies only while every client waits at a barrier.
"""

import json
import os
import threading
import time
from pathlib import Path

import zmq

from playground.comm.addresses import local_ip_towards
from playground.core.errors import CommTimeout, LabError
from playground.kvcache.engine.llm_engine import STEP_LOG_COLUMNS
from playground.kvcache.server.client import KVClient
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.loop import router_socket, serve

TAG_RESULT = 41
ENGINE_LOG = "serving-engine.jsonl"


class ServerThread(threading.Thread):
    """Owns the ROUTER socket (created in this thread); `server` is swapped between policies
    only while every client waits at a barrier."""

    def __init__(self, bind: str):
        super().__init__(name="kvcache-server", daemon=True)
        self.bind = bind
        self.address: str | None = None
        self.error: str | None = None
        self.server: KVServer | None = None
        self.ready, self.stopping = threading.Event(), threading.Event()

    @property
    def live(self) -> KVServer:
        assert self.server is not None, "a policy's server is set before the clients are let in"
        return self.server

    def handle(self, client: bytes, frames: list) -> list[bytes] | None:
        return self.live.handle(client, frames)

    def expire_leases(self) -> list[int]:
        return self.live.expire_leases()

    def error_frames(self, req_id, code: str, message: str) -> list[bytes]:
        return self.live.error_frames(req_id, code, message)

    def has_work(self) -> bool:
        return self.live.has_work()

    def step(self) -> list[tuple[bytes, list[bytes]]]:
        return self.live.step()

    @property
    def errors(self) -> dict[str, int]:
        return self.live.errors

    @property
    def last_seen(self) -> dict[bytes, float]:
        return self.live.last_seen

    def run(self):
        ctx = zmq.Context()
        sock = router_socket(ctx)
        try:
            sock.bind(self.bind)
            self.address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self.ready.set()
            serve(self, sock, stop=self.stopping.is_set)
        except Exception as e:  # reported by the main thread
            self.error = f"{type(e).__name__}: {e}"
            self.ready.set()
        finally:
            sock.close(0)
            ctx.term()


def start_server_thread(comm, endpoint: str, server: KVServer, name: str) -> ServerThread:
    """Rank 0: `server` on a thread of its own bound to tcp (the address its peers reach: loopback
    on one host, the host's own on emulated hosts) or to an ipc path in the run directory; its
    address is broadcast to the clients (they call `comm.bcast_obj(None)`)."""
    here = local_ip_towards(os.environ.get("MASTER_ADDR", "127.0.0.1"))  # on emulated hosts, the host's
    bind = f"tcp://{here}:*" if endpoint == "tcp" else f"ipc://{comm.run_dir}/{name}.sock"
    thread = ServerThread(bind)
    thread.server = server
    thread.start()
    if not thread.ready.wait(comm.timeout_s) or thread.error:
        raise LabError(
            f"{name} server did not start on {bind}: {thread.error or 'timed out'}", step=f"{name} server"
        )
    comm.bcast_obj(thread.address)
    return thread


def rank_client(comm, address: str) -> KVClient:
    """A client rank's KVClient of rank 0's server: the scenario's timeout, and between the slices
    of every wait the launcher's abort, so that a rank waiting for the server (not in the
    communicator) still stops within a slice when another rank fails, naming rank 0; and a server
    silent for the timeout is a CommTimeout waiting for rank 0 (its host named across hosts), as a
    silent peer in the communicator is, so the launcher ranks it as a consequence of rank 0. Its
    routing id is `rank-<r>`, so a server that keeps a journal knows the rank again after the run
    restarted (serving/resume.py)."""

    def no_reply(what: str) -> CommTimeout:
        return CommTimeout(
            comm.rank,
            "a kvcache server reply",
            peer=0,
            waited_s=comm.timeout_s,
            what=f"rank 0's kvcache server to reply to {what} at {address}",
            context=comm.op_context(0),
        )

    return KVClient(
        address,
        timeout_s=comm.timeout_s,
        on_wait=lambda: comm.check_abort(0, op="a kvcache server reply"),
        on_timeout=no_reply,
        identity=f"rank-{comm.rank}".encode(),  # the same after a restart of the run
    )


class EngineLog:
    """The engine's state every SAMPLE_S while rank 0 waits (running and waiting sequences, KV
    slots and blocks allocated, from its step log's newest row), one JSON line appended to
    serving-engine.jsonl of the run directory: a live view reads it while the run goes (the whole
    step log comes only with the result). Read from this thread without touching the engine's own
    structures: the newest row of a list the engine thread appends to."""

    SAMPLE_S = 0.2

    def __init__(self, run_dir):
        self.path = None if run_dir is None else Path(run_dir) / ENGINE_LOG
        self.next_s = 0.0

    def sample(self, srv, policy: str) -> None:
        engine, now = getattr(srv, "engine", None), time.monotonic()
        if self.path is None or engine is None or not engine.step_log or now < self.next_s:
            return
        self.next_s = now + self.SAMPLE_S
        row = dict(zip(STEP_LOG_COLUMNS, engine.step_log[-1], strict=False))
        pool = engine.policy
        line = {
            "policy": policy,
            "time_s": round(time.time(), 3),  # wall clock: one axis across the policies' engines
            "t_s": round(row["t_s"], 3),
            "running": row["running"],
            "waiting": row["waiting"],
            "kv_slots": row["allocated_slots"],
            "kv_blocks": -(-row["allocated_slots"] // pool.block_size),
            "capacity_blocks": pool.capacity_slots // pool.block_size,
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def collect_results(
    comm, srv: KVServer, p, policy: str, thread: ServerThread, progress=None, label: str = "kvcache"
) -> dict:
    """Wait for every client's result, driving the progress bar (`progress()` -> (done, total),
    by default the section 4.6 requests freed); fail if no request reaches the server for longer
    than the scenario's timeout (a stuck run becomes an error, not a hang)."""
    out, pending = {}, set(range(1, comm.size))
    last_ops, last_change = srv.num_ops, time.monotonic()
    log = EngineLog(comm.run_dir)
    total = p.num_requests if p.workload == "section46" else 1
    if progress is None and p.workload == "section46":
        progress = lambda: (min(srv.num_freed_seqs, total), total)  # noqa: E731
    while pending:
        for src in sorted(pending):
            try:
                out[src] = comm.recv_obj(src, TAG_RESULT, timeout_s=0.1)
                pending.discard(src)
            except CommTimeout:
                pass
        if thread.error:
            raise LabError(f"kvcache server thread failed: {thread.error}", step="kvcache server thread")
        if srv.num_ops != last_ops:
            last_ops, last_change = srv.num_ops, time.monotonic()
        elif time.monotonic() - last_change > comm.timeout_s:
            raise CommTimeout(
                0,
                f"kvcache results ({policy}; no request reached the server)",
                min(pending),
                TAG_RESULT,
                comm.timeout_s,
            )
        if progress is not None:
            comm.progress(*progress(), f"{label} {policy}")
        log.sample(srv, policy)
    return {str(k): v for k, v in sorted(out.items())}
