"""The KV-cache server's ZeroMQ ROUTER loop.

The server itself touches no socket (kv_ops.KVServer, generate.ModelServer); `serve()` is the
loop in front of it: poll (without waiting while a model's engine has work), handle, reply, run
an engine step, expire leases. A `generate` reply is sent when its request finishes, to the client
that asked, with a REQ client's delimiter frame.
"""

from typing import Protocol

import zmq

from playground.kvcache.server import protocol as P


class Served(Protocol):
    """What the loop needs of a server: a KVServer, or thread.ServerThread standing in for one."""

    @property
    def errors(self) -> dict[str, int]: ...
    @property
    def last_seen(self) -> dict[bytes, float]: ...
    def handle(self, client: bytes, frames: list) -> list[bytes] | None: ...
    def error_frames(self, req_id, code: str, message: str) -> list[bytes]: ...
    def has_work(self) -> bool: ...
    def step(self) -> list[tuple[bytes, list[bytes]]]: ...
    def expire_leases(self) -> list[int]: ...


def router_socket(ctx: zmq.Context) -> zmq.Socket:
    """The server's ROUTER: dropped at once when closed; a client that connects again under its
    routing id (KVClient keeps one) takes its old connection over instead of being ignored."""
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    sock.router_handover = 1
    return sock


def serve(server: Served, sock: zmq.Socket, stop=lambda: False, poll_ms: int = 50) -> None:
    """Answer requests on a ROUTER socket until stop() is true, running an engine step between
    two polls while the engine has work; never blocks longer than poll_ms. `server` is a KVServer
    or a stand-in for one (thread.ServerThread, whose server is swapped between policies)."""
    envelopes: dict[bytes, list[bytes]] = {}  # a REQ client's delimiter frame, echoed in its replies
    while not stop():
        busy = server.has_work()
        if sock.poll(0 if busy else poll_ms):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                identity, body = frames[0].bytes, frames[1:]
                envelope = []
                if body and len(body[0]) == 0:  # a REQ client's delimiter: keep it for the reply
                    envelope, body = [b""], body[1:]
                envelopes[identity] = envelope
                try:
                    reply = server.handle(identity, [f.buffer for f in body])
                except Exception as e:  # a bug must not take the server down for every other client
                    server.errors[P.INTERNAL_ERROR] = server.errors.get(P.INTERNAL_ERROR, 0) + 1
                    reply = server.error_frames(
                        P.request_id([f.buffer for f in body]), P.INTERNAL_ERROR, f"{type(e).__name__}: {e}"
                    )
                if reply is not None:
                    sock.send_multipart([identity, *envelope, *reply], copy=False)
        if busy:
            for identity, reply in server.step():
                sock.send_multipart([identity, *envelopes.get(identity, []), *reply], copy=False)
        if server.expire_leases() or len(envelopes) > 2 * len(server.last_seen) + 64:
            envelopes = {i: e for i, e in envelopes.items() if i in server.last_seen}
