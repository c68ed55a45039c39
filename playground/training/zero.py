"""ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer's states sharded across ranks.

Adam keeps two numbers per parameter (m and v): in float32 twice the parameters' own memory, on
every rank of plain data parallelism. Stage 1 gives each rank 1/N of them:

1. reduce-scatter the gradients: rank r ends with the sum over ranks of its shard, elements
   [r S/N, (r+1) S/N) of the flat buffer (`ChunkBounds`), written where they lie (in place);
2. Adam on that shard only, with m and v of that shard only (1/N of the states);
3. all-gather the updated parameters, in place, so every rank holds all of them again.

A reduce-scatter plus an all-gather move the same bytes as one ring all-reduce (which is exactly
those two phases), so the saving costs no bandwidth; it costs the overlap: here both run after
backward. Adam is elementwise, so stepping shard by shard equals stepping the whole buffer bit for
bit (tested in the transformer's optimizer tests): ZeRO-1 computes the same update as DDP.

The reduce-scatter is checked as the all-reduces are (`checks`): every rank sums what it put into
every shard, and each shard's owner sums the result it holds.
"""

import numpy as np

from playground.collectives import allgather, reduce_scatter
from playground.collectives.chunks import ChunkBounds
from playground.training.checks import Reduction, checksum, element_sum
from playground.transformer.optim import Adam, AdamConfig


class ZeroOne:
    """This rank's shard of the flat buffers and Adam over it; `reduce_gradients()` after backward,
    `step()` to update the shard, `gather_params()` to share it."""

    def __init__(self, comm, params: np.ndarray, grads: np.ndarray, adam: AdamConfig, span_args: dict):
        self.comm, self.params, self.grads, self.span_args = comm, params, grads, span_args
        self.bounds = ChunkBounds(params.size, comm.size)
        self.start, self.stop = self.bounds[comm.rank]
        self.optimizer = Adam(self.stop - self.start, params.dtype, adam)
        self.sums: list[Reduction] = []

    def reduce_gradients(self, step: int) -> None:
        sums = [checksum(self.grads[a:b]) for a, b in self.bounds]
        with self.comm.tracer.span(
            "zero1.reduce_scatter", cat="op", step=step, bytes=int(self.grads.nbytes), **self.span_args
        ):
            reduce_scatter(self.comm, self.grads, inplace=True)
        mine = element_sum(self.grads[self.start : self.stop])
        self.sums = [
            Reduction(f"shard {r}", s, a, mine if r == self.comm.rank else None)
            for r, (s, a) in enumerate(sums)
        ]

    def step(self) -> None:
        self.optimizer.step(self.params[self.start : self.stop], self.grads[self.start : self.stop])

    def gather_params(self, step: int) -> None:
        with self.comm.tracer.span(
            "zero1.allgather", cat="op", step=step, bytes=int(self.params.nbytes), **self.span_args
        ):
            allgather(self.comm, self.params, inplace=True)

    def reductions(self) -> list[Reduction]:
        return self.sums

    @property
    def state_bytes(self) -> int:
        return self.optimizer.state_bytes
