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

import time

import numpy as np

from playground.collectives import allgather, reduce_scatter
from playground.collectives.bucketing import Bucket
from playground.collectives.chunks import ChunkBounds
from playground.core.errors import UsageError
from playground.training.checks import Reduction, checksum, element_sum
from playground.training.whole_params import WholeParams
from playground.transformer.optim import Adam


class ZeroOne(WholeParams):
    """This rank's shard of the flat buffers and Adam over it (a `modes.GradientStrategy`):
    `reduce()` reduce-scatters after backward, `update()` steps the shard, `gather()` shares it.
    `buckets` is the mode's plan, one of everything: what one step communicates, for the record."""

    on_grad_ready = None  # nothing to hand over during backward: the reduce-scatter runs after it

    def __init__(self, comm, model, buckets: list[Bucket], setup, mode, owns_comm: bool = True):
        self.comm, self.params, self.grads, self.buckets = comm, model.params, model.grads, buckets
        self.span_args = {"mode": mode.name}
        self.bounds = ChunkBounds(self.params.size, comm.size)
        self.start, self.stop = self.bounds[comm.rank]
        self.optimizer = Adam(self.stop - self.start, self.params.dtype, setup.adam)
        self.lr_at = setup.lr_at
        self.sums: list[Reduction] = []
        self.step = 0
        self.collective_s = 0.0  # this step's reduce-scatter and all-gather, checksums included

    def begin(self, step: int) -> None:
        self.step = step
        self.collective_s = 0.0

    def reduce(self) -> None:
        t0 = time.perf_counter()
        sums = [checksum(self.grads[a:b]) for a, b in self.bounds]
        with self.comm.tracer.span(
            "zero1.reduce_scatter", cat="op", step=self.step, bytes=int(self.grads.nbytes), **self.span_args
        ):
            reduce_scatter(self.comm, self.grads, inplace=True)
        mine = element_sum(self.grads[self.start : self.stop])
        self.sums = [
            Reduction(f"shard {r}", s, a, mine if r == self.comm.rank else None)
            for r, (s, a) in enumerate(sums)
        ]
        self.collective_s += time.perf_counter() - t0

    def update(self) -> None:
        lr = self.lr_at(self.step)
        self.optimizer.step(self.params[self.start : self.stop], self.grads[self.start : self.stop], lr)

    def gather(self) -> None:
        t0 = time.perf_counter()
        with self.comm.tracer.span(
            "zero1.allgather", cat="op", step=self.step, bytes=int(self.params.nbytes), **self.span_args
        ):
            allgather(self.comm, self.params, inplace=True)
        self.collective_s += time.perf_counter() - t0

    def reductions(self) -> list[Reduction]:
        return self.sums

    def state(self) -> dict:
        """Adam's m and v of this rank's shard, its step count, and the shard's bounds (checked on load)."""
        bounds = np.array([self.start, self.stop], dtype=np.int64)
        return {"shard": bounds, **{f"adam.{k}": v for k, v in self.optimizer.state().items()}}

    def load_state(self, state: dict) -> None:
        if [int(x) for x in state["shard"]] != [self.start, self.stop]:
            raise UsageError(
                f"rank {self.comm.rank}: the saved ZeRO-1 shard is elements {list(state['shard'])}, "
                f"this rank's is [{self.start}, {self.stop}]"
            )
        self.optimizer.load_state({k.removeprefix("adam."): v for k, v in state.items() if k != "shard"})

    def close(self) -> None:
        """Nothing to stop: no thread of its own."""
