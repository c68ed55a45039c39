"""The one I/O step every algorithm is built from: send some ranges of a buffer to one peer while
receiving other ranges from another, reducing (or copying) each received segment as it lands.

A send the caller lends (`lend`) may be read by the receiver straight from the sender's memory
(shm: one copy instead of two, comm/shm_lend.py); the exchange waits for it before returning.

Both sides cut their ranges into segments with `segment_bounds`, so the receiver knows how many
messages to expect without any extra header. All sends are posted first; while a segment is being
reduced, ZeroMQ's I/O thread keeps receiving the next ones, so sending, receiving and reducing overlap.
"""

from collections.abc import Sequence

import numpy as np

from playground.collectives.chunks import segment_bounds
from playground.collectives.ops import ReduceOp
from playground.comm.requests import PendingOp
from playground.core.errors import MessageMismatch


def count_mismatch(comm, peer: int | None, tag: int, what: str, got: int, want: int, op: str | None = None):
    """The error for a message of `got` elements where `want` were expected: what each algorithm
    raises when ranks disagree on count or dtype (`what` names the exchange, `op` its operation)."""
    return MessageMismatch(
        f"rank {comm.rank}: {what}: expected {want} elements from rank {peer}, "
        f"got {got} (do all ranks pass the same count and dtype?)",
        rank=comm.rank,
        peer=peer,
        direction="from",
        tag=tag,
        op=op or what,
    )


def exchange(
    comm,
    buf: np.ndarray,
    send: tuple[int, int] | None,
    send_to: int | None,
    recv: tuple[int, int] | None,
    recv_from: int | None,
    segment_elems: int,
    op: ReduceOp | None,
    tag: int,
    what: str,
    step: int | None = None,
    source: np.ndarray | None = None,
    lend: bool = False,
) -> None:
    """Send buf[send] (or `source`[send]: a buffer of its own, as an all-to-all's input is) to
    `send_to` and receive into buf[recv] from `recv_from`: reduce with `op`, or copy. `what` (and
    `step`, when the caller has steps) names the exchange in errors. With `lend` the sends are lent
    (`isend_lent`: the receiver may read them where they lie, one copy): for pure data movement,
    where the bytes sent are not written before this returns."""
    sends: Sequence[PendingOp] = ()
    if send is not None:
        src = buf if source is None else source
        isend = comm.isend_lent if lend else comm.isend
        a, b = send
        if b - a <= segment_elems:  # one message: the common case for small buffers, kept lean
            sends = (isend(src[a:b], send_to, tag),)
        else:
            sends = [isend(src[a:b], send_to, tag) for a, b in segment_bounds(a, b, segment_elems)]
    if recv is not None:
        ufunc = None if op is None else op.ufunc
        a, b = recv
        bounds = ((a, b),) if b - a <= segment_elems else segment_bounds(a, b, segment_elems)
        for a, b in bounds:
            got = comm.recv_reduce(recv_from, tag, buf[a:b], ufunc)
            if got != b - a:
                if step is not None:  # (formatted here: a ring has 2(N-1) steps per call)
                    what = f"{what} step {step}"
                raise count_mismatch(comm, recv_from, tag, what, got, b - a)
    for req in sends:
        req.wait()
