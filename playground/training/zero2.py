"""ZeRO stage 2 (Rajbhandari et al., 2020; DeepSpeed's `stage: 2`): the gradients sharded too.

ZeRO-1 keeps every gradient on every rank until the reduce-scatter after backward. Stage 2 never
holds them whole: each unit's gradients are reduce-scattered the moment backward finishes the unit,
on the communication thread while backward goes on, into this rank's shard, and the unit's buffer
goes (`sharded.UnitStrategy`). Adam updates this rank's chunk of every unit in place in the
model's (whole, replicated) parameters, and an all-gather per unit after the update brings every
rank every parameter, as ZeRO-1's does.

Per rank, with b bytes a number (8 in float64) and Adam's two states:

    parameters b Psi (whole)  +  gradients b Psi / N  +  m, v 2 b Psi / N  =  b Psi + 3 b Psi / N

(the ZeRO paper's 2 Psi + 14 Psi / N in mixed precision), and a unit or two of whole gradients while
backward runs. Traffic: a reduce-scatter and an all-gather of everything, 2 (N - 1) / N Psi b a
rank, as DDP's all-reduce; with m micro-batches of gradient accumulation, m reduce-scatters (DDP
all-reduces once: it can accumulate in its whole gradient buffer).

The all-gathers are checked as ZeRO-1's: after the update every rank hashes its whole parameters.
"""

import time

import numpy as np

from playground.collectives import allgather
from playground.training.sharded import UnitStrategy
from playground.training.whole_params import WholeParams


class ZeroTwo(UnitStrategy):
    """Gradients and Adam's states sharded by units, parameters whole (a `modes.GradientStrategy`)."""

    agree_params = WholeParams.agree_params
    full_params = WholeParams.full_params
    held = WholeParams.held

    def __init__(self, comm, model, buckets, setup, mode, owns_comm: bool = True):
        self.params = model.params
        super().__init__(comm, model, buckets, setup, mode, owns_comm)

    def param_shard(self, u: int) -> np.ndarray:
        unit, (a, b) = self.units.units[u], self.chunks[u]
        return self.params[unit.start + a : unit.start + b]

    def gather(self) -> None:
        """Every unit's updated chunks to every rank, in place, on this thread (after the update)."""
        t0 = time.perf_counter()
        for unit in self.units.units:
            whole = self.params[unit.start : unit.stop]
            with self.comm.tracer.span(
                "unit.allgather",
                cat="op",
                step=self.step,
                unit=unit.index,
                bytes=int(whole.nbytes),
                **self.span_args,
            ):
                allgather(self.comm, whole, inplace=True)
        self.collective_s += time.perf_counter() - t0

    def params_bytes(self) -> int:
        return int(self.params.nbytes)
