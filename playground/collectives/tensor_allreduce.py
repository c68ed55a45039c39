"""The all-reduce a tensor-parallel model runs inside every block (Megatron-LM's f and g): the
tensor group's sum of a partial product, on the critical path, so its time is the layer's.

A `TensorAllReduce` is what `Transformer(..., all_reduce=...)` calls with a fresh array (a
row-parallel product forward, a column-parallel product's input gradient backward) and the name of
the product (`h.3.mlp.c_proj`): it sums the array over the group in place with the algorithm `auto`
picks by size (recursive doubling for the small activations of a decode step, the ring for large
ones), as a collective named after the product, so a rank that died or hangs is reported with the
layer its peers waited in ("in h.3.mlp.c_proj allreduce[tensor] rd #57"); it traces it as one
`tensor.allreduce` span with its bytes, and counts its calls and seconds, which is how a step tells
its communication from its compute. Every rank of the group ends with the same bits (the collectives' contract), so the
replicated computation after it (layernorms, the residual stream, the head) stays identical on
every shard without any further message.

Its cost on an alpha-beta link is the algorithm's (`allreduce_time_s`, the registry's formula of
the algorithm `auto` would pick): each block pays two in forward and two in backward, of the
activation's bytes (tokens x d x itemsize), so a tensor-parallel layer's time is

    compute / t + 2 x allreduce(tokens x d x itemsize, t)          (forward; backward the same)

which pays only while the first term's saving outweighs the second: never for a small model's
decode step, whose all-reduces cost alpha each however few bytes they carry.
"""

import time

import numpy as np

from playground.collectives import registry
from playground.collectives.auto import choose_allreduce
from playground.collectives.ops import ReduceOp
from playground.models.costs import Link

SPAN = "tensor.allreduce"


class TensorAllReduce:
    """The sum over `group` of a C-contiguous array, in place; `seconds` (by `clock`: a simulated
    rank's is virtual) and `calls` so far."""

    def __init__(self, group, algorithm: str = "auto", clock=time.perf_counter):
        self.group, self.algorithm, self.clock = group, algorithm, clock
        self.seconds = 0.0
        self.calls = 0
        self.bytes = 0

    def __repr__(self):
        return f"TensorAllReduce({self.group!r}, {self.algorithm})"

    def __call__(self, x: np.ndarray, where: str = "tensor") -> np.ndarray:
        """`x` summed over the group, in place; `where`: the product it completes (for errors)."""
        group, algorithm = self.group, self.algorithm
        if algorithm == registry.AUTO:
            algorithm = choose_allreduce(x.nbytes, group.size)
        t0 = self.clock()
        with group.tracer.span(SPAN, cat="comm", bytes=x.nbytes, where=where):
            group.begin_collective(f"{where} allreduce", algorithm, x, ReduceOp.SUM)
            try:
                registry.get("allreduce", algorithm).run(group, x, ReduceOp.SUM, group.segment_bytes, True)
            except BaseException:
                group.end_collective(False)
                raise
            group.end_collective()
        self.seconds += self.clock() - t0
        self.calls += 1
        self.bytes += x.nbytes
        return x

    def reset(self) -> None:
        self.seconds, self.calls, self.bytes = 0.0, 0, 0


def allreduce_time_s(nbytes: int, t: int, link: Link, algorithm: str = "auto") -> float:
    """The model's time of one tensor all-reduce of `nbytes` over t ranks (0 for t = 1)."""
    if t < 2:
        return 0.0
    algo = choose_allreduce(nbytes, t) if algorithm == registry.AUTO else algorithm
    return registry.collective_time_s("allreduce", algo, nbytes, t, link)
