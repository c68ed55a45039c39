"""Bare pyzmq PUSH/PULL between ranks 0 and 1, the yardstick the ping-pong lab measures our
communicator against: the same transport (ipc or tcp), the same zero-copy send for large
messages, and nothing else (no header frame, no matching, no deadlines but one receive timeout).
"""

import os

import numpy as np
import zmq

from playground.comm.addresses import local_ip_towards
from playground.core.errors import CommTimeout


class RawPair:
    """Bare pyzmq PUSH/PULL between two ranks: the yardstick for our per-message overhead."""

    def __init__(self, comm, transport: str):
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.timeout_s = comm.timeout_s
        self.pull.setsockopt(zmq.RCVTIMEO, int(comm.timeout_s * 1000))  # every blocking receive has a timeout
        self.peer = 1 - comm.rank
        if transport == "tcp":  # on the address other hosts reach us at (127.0.0.1 on one host)
            self.pull.bind(f"tcp://{local_ip_towards(os.environ.get('MASTER_ADDR', '127.0.0.1'))}:*")
            endpoint = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            endpoint = f"ipc://{comm.run_dir.resolve()}/raw-{comm.rank}-{os.getpid()}.sock"
            if len(endpoint) > 100:
                endpoint = f"ipc:///tmp/playground-raw-{comm.rank}-{os.getpid()}.sock"
            self.pull.bind(endpoint)
        peer_endpoint = comm.allgather_obj(endpoint)[1 - comm.rank]
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 0)
        self.push.connect(peer_endpoint)
        self.endpoint = endpoint

    def send(self, buf: np.ndarray) -> None:
        if buf.nbytes >= 65536:  # an ndarray is a buffer (numpy's stubs before Python 3.12 do not say so)
            self.push.send(buf, copy=False, track=True).wait()  # type: ignore[call-overload]
        else:
            self.push.send(buf)  # type: ignore[call-overload]

    def recv(self, out: np.ndarray) -> None:
        try:
            frame = self.pull.recv(copy=False)
        except zmq.Again:
            raise CommTimeout(1 - self.peer, "raw pyzmq recv", self.peer, None, self.timeout_s) from None
        out[:] = np.frombuffer(frame.buffer, dtype=out.dtype)

    def close(self):
        self.push.close(linger=0)
        self.pull.close(linger=0)
        self.ctx.term()
        if self.endpoint.startswith("ipc://"):
            try:
                os.unlink(self.endpoint[len("ipc://") :])
            except OSError:
                pass
