"""The expert group's all-to-all, as a mixture-of-experts layer calls it (`transformer.moe.Exchange`):
`counts` (equal blocks: each rank's counts for every peer, `collectives.alltoall`) and `rows` (a count
of rows per peer, zeros allowed: `collectives.alltoallv`), over the expert group of the grid, a
process group like any other.

Each call is a collective named on the group ("alltoallv[expert0] scattered #12": expert group 0), so
a rank that died in a step is reported by the all-to-all its peers waited in, and is traced as one
`moe.alltoall` span with its bytes. It records what this rank sent to and received from the others
(`calls`: [bytes out, bytes in, seconds] per call, its own block left out), which is what the
alpha-beta model of the step's all-to-alls reads (`steptime_model`); a call's seconds include the wait
for the last rank to arrive, so the rank that waited least in a call (the last to arrive) timed the
exchange itself.
"""

import time

import numpy as np

from playground.collectives import alltoall, alltoallv

SPAN = "moe.alltoall"


class ExpertAllToAll:
    """`group`'s all-to-alls; `algorithm` (pairwise, scattered) for the rows, `auto` for the counts."""

    def __init__(self, group, algorithm: str = "scattered"):
        self.group, self.algorithm = group, algorithm
        self.size = group.size
        self.calls: list[list[float]] = []

    def reset(self) -> list[list[float]]:
        """The calls since the last reset ([bytes out, bytes in, seconds] each), and none again."""
        out, self.calls = self.calls, []
        return out

    def counts(self, send: np.ndarray) -> np.ndarray:
        """(P, c) int64, row r for rank r -> (P, c), row s from rank s."""
        send = np.ascontiguousarray(send, dtype=np.int64)
        others = (send.nbytes // self.size) * (self.size - 1)
        t0 = time.perf_counter()
        with self.group.tracer.span(SPAN, cat="comm", bytes=send.nbytes, what="counts"):
            out = alltoall(self.group, send)
        self.calls.append([others, others, time.perf_counter() - t0])
        return out.reshape(send.shape)

    def rows(self, x: np.ndarray, send_rows: np.ndarray, recv_rows: np.ndarray) -> np.ndarray:
        """(m, w): send_rows[r] rows for rank r, in rank order -> (R, w): recv_rows[s] rows from rank s."""
        width, me = x.shape[-1], self.group.rank
        send = [int(n) * width for n in send_rows]
        recv = [int(n) * width for n in recv_rows]
        itemsize, t0 = x.dtype.itemsize, time.perf_counter()
        with self.group.tracer.span(SPAN, cat="comm", bytes=sum(send) * itemsize, what="rows"):
            out = alltoallv(self.group, np.ascontiguousarray(x), send, recv, self.algorithm)
        out_bytes, in_bytes = (sum(send) - send[me]) * itemsize, (sum(recv) - recv[me]) * itemsize
        self.calls.append([out_bytes, in_bytes, time.perf_counter() - t0])
        return out.reshape(-1, width)
