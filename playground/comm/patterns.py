"""The point-to-point patterns `calibrate` times between pairs of ranks (nodes/calibrate.py), kept
here so that the simulator can replay them as the ranks ran them (playground/sim/replay.py).

- `pingpong`: one sends, the other echoes (the textbook one-way time: half a round trip);
- `pingping`: both send, then receive (IMB's PingPing): a message is often there when asked;
- `window`: both post WINDOW sends, then take WINDOW messages (osu_bibw's): most messages are there
  before their receiver asks, as in an all-to-all's scattered form;
- `numpy`: a small numpy call (Bruck's packing: rows of a block taken into another) timed on the
  rank's own thread right after each message of a ping-ping, against the same call in a loop. A rank
  that shares its core with others finds the caches and the TLB holding their state when it runs
  again (a context switch leaves the caches to the next process), so the call costs more than in a
  loop: what `numpy_scale` (models/hostfit.py) charges an algorithm's own numpy calls in the simulator;
- `behind_compute`: the ping-ping while every rank's other thread computes (`Computing`), as a
  training rank's communication thread exchanges while its compute thread runs backward. Where
  ranks and their compute threads outnumber the cores, a message whose receiver's process is off its
  core waits until the scheduler gives it one back: most exchanges take no longer than on idle ranks,
  a few a whole time slice, and the mean (`mean_s`, not the median) is what a collective's steps pay
  (models/calibration.py's `behind_compute`).
"""

import threading
import time
from collections.abc import Callable

import numpy as np

TAG = 7200
WINDOW = 8  # the window's messages in flight each way (osu_bibw's is 64; 8 fill no ring)
PATTERNS = ("pingpong", "pingping", "window")
# messages a timed unit moves, both ranks' sides of each: a round trip, an exchange, a window
MESSAGES_PER_UNIT = {"pingpong": 2, "pingping": 1, "window": WINDOW, "behind_compute": 1}
BEHIND_COMPUTE_MAX_BYTES = 1 << 20  # what a training unit's collective sends a step at most, here
BEHIND_COMPUTE_REPS = 200  # its tail is the point: a mean over many exchanges


class Computing:
    """A thread doing a training rank's compute beside the communication: matrix products of a
    block's size in a loop (numpy releases the GIL in them, as in backward), from `with` to its end."""

    def __init__(self, width: int = 96):
        self.a = np.random.default_rng(0).random((width, width))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="computing", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for _ in range(16):
                self.a @ self.a

    def __enter__(self) -> "Computing":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def round_trips(
    comm, peer: int, buf: np.ndarray, out: np.ndarray, count: int, both: bool = False
) -> list[float]:
    """`count` round trips with `peer` (both=True: both send at once, then receive: IMB's PingPing)."""
    times = []
    even = comm.rank % 2 == 0
    for _ in range(count):
        t0 = time.perf_counter()
        if even or both:
            comm.send(buf, peer, TAG)
            comm.recv(peer, TAG, out=out)
        else:
            comm.recv(peer, TAG, out=out)
            comm.send(out, peer, TAG)
        times.append(time.perf_counter() - t0)
    return times


def windows(comm, peer: int, buf: np.ndarray, out: np.ndarray, count: int) -> list[float]:
    """`count` windows with `peer`: WINDOW sends posted, then WINDOW messages taken."""
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        sends = [comm.isend(buf, peer, TAG) for _ in range(WINDOW)]
        for _ in range(WINDOW):
            comm.recv(peer, TAG, out=out)
        for req in sends:
            req.wait()
        times.append(time.perf_counter() - t0)
    return times


def numpy_probe() -> Callable[[], object]:
    """The call the `numpy` pattern times: four rows of an 8 x 16 float32 block taken into a buffer."""
    blocks, idx, into = np.zeros((8, 16), np.float32), np.array([1, 3, 5, 7]), np.empty((4, 16), np.float32)
    return lambda: np.take(blocks, idx, axis=0, out=into)


def numpy_times(comm, peer: int, buf: np.ndarray, out: np.ndarray, count: int) -> tuple[float, float]:
    """(the probe's mean time in a loop, its mean time right after each of `count` ping-ping
    messages), seconds of this thread's CPU. Means: most calls after a message find the caches warm
    and a few (those after a switch) pay for the others' state, and the mean is what they cost."""
    probe = numpy_probe()
    for _ in range(200):
        probe()
    hot = after = 0
    for _ in range(count):  # each call timed alone, as after a message: the clock's own cost in both
        t0 = time.thread_time_ns()
        probe()
        hot += time.thread_time_ns() - t0
    for _ in range(count):
        comm.send(buf, peer, TAG)
        comm.recv(peer, TAG, out=out)
        t0 = time.thread_time_ns()
        probe()
        after += time.thread_time_ns() - t0
    return hot / count * 1e-9, after / count * 1e-9


def timed(comm, pattern: str, peer: int, buf: np.ndarray, out: np.ndarray, count: int) -> list[float]:
    """`count` units of `pattern` with `peer`, each unit's wall time."""
    if pattern == "window":
        return windows(comm, peer, buf, out, count)
    return round_trips(comm, peer, buf, out, count, both=pattern in ("pingping", "behind_compute"))
