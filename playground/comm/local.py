"""An in-process stand-in for the communicator: one thread per rank, queues instead of sockets.

It runs the very same collective code as the ZeroMQ communicator, which makes large
correctness grids fast (no processes) and lets a schedule be tried without a launcher. It is a
model of the transport, not a transport: real runs always go over ZeroMQ.
"""

import queue
import threading
from collections import defaultdict

import numpy as np

from playground.errors import CommTimeout
from playground.trace import Tracer


class _Done:
    def wait(self, timeout_s=None):
        return None

    def test(self):
        return True


class LocalCommunicator:
    def __init__(self, rank: int, size: int, mailboxes, timeout_s: float = 10.0):
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self.tracer = Tracer(rank, None, enabled=False)
        self._mail = mailboxes
        self.bytes_sent = self.bytes_received = 0

    def isend(self, x: np.ndarray, dst: int, tag: int = 0):
        if not 0 <= dst < self.size:
            raise ValueError(f"rank {self.rank}: destination {dst} is not a rank (world size {self.size})")
        arr = np.array(x, copy=True)
        arr.flags.writeable = False
        self._mail[(dst, self.rank, tag)].put(arr)
        self.bytes_sent += arr.nbytes
        return _Done()

    def isend_computed(self, dst: int, tag: int, count: int, dtype, fill):
        out = np.empty(count, np.dtype(dtype))
        fill(out)
        return self.isend(out, dst, tag)

    def send(self, x, dst, tag=0):
        self.isend(x, dst, tag)

    def recv(self, src: int, tag: int = 0, out=None, timeout_s=None):
        t = self.timeout_s if timeout_s is None else timeout_s
        try:
            arr = self._mail[(self.rank, src, tag)].get(timeout=t)
        except queue.Empty:
            raise CommTimeout(self.rank, "recv", src, tag, t) from None
        self.bytes_received += arr.nbytes
        if out is not None:
            np.copyto(out.reshape(arr.shape), arr)
            return out
        return arr

    def recv_reduce(self, src: int, tag: int, target: np.ndarray, ufunc=None, base=None) -> int:
        arr = self.recv(src, tag)
        if arr.size == target.size:
            if ufunc is None:
                np.copyto(target, arr.reshape(target.shape))
            else:
                ufunc(target if base is None else base, arr.reshape(target.shape), out=target)
        return arr.size

    def barrier(self, timeout_s=None):
        empty = np.empty(0, dtype=np.uint8)
        dist = 1
        while dist < self.size:
            self.isend(empty, (self.rank + dist) % self.size, -1)
            self.recv((self.rank - dist) % self.size, -1, timeout_s=timeout_s)
            dist *= 2


def run_local(size: int, fn, timeout_s: float = 30.0) -> list:
    """Run fn(comm) on `size` threads, one LocalCommunicator each; returns each rank's result.

    The first exception raised on any rank is re-raised here.
    """
    lock = threading.Lock()
    mail: dict = defaultdict(queue.Queue)

    class _Mail(dict):
        def __missing__(self, key):
            with lock:
                return mail[key]

    boxes = _Mail()
    results: list = [None] * size
    errors: list = []

    def body(rank):
        try:
            results[rank] = fn(LocalCommunicator(rank, size, boxes, timeout_s))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"run_local: ranks still running after {timeout_s + 5}s")
    return results
