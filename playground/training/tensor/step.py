"""One training step of a tensor-parallel shard on a data x tensor grid, timed phase by phase.

    forward:   this replica's rows on every shard of its tensor group; each block's two
               row-parallel products completed by an all-reduce over `grid.tensor` (g); the loss is
               the replicated head's, the same on every shard, divided by the global batch's token
               count (so the sum over replicas is the global mean)
    backward:  each block's two column-parallel input gradients all-reduced over `grid.tensor` (f);
               the shard's gradients written into its own buffer (its slices of the split matrices,
               whole copies of the replicated parameters, identical on every shard)
    data:      the data-parallel mode's strategy over `grid.data` (the training lab's `Mode`), on the
               shard's gradients: the replicas of one shard hold the same slices, so every mode
               runs unchanged (zero3 gathers a unit of the shard's parameters before each piece that
               reads it, on this thread, and frees it after); then Adam on the shard
    checks:    the training lab's over `grid.data`; and over `grid.tensor`, that the shards computed
               the same loss and hold bit-identical replicated parameters after the update

The data-parallel all-reduces start after backward, not during it as DDP overlaps them: the tensor
all-reduces run inside backward on the main thread, and one communicator serves both groups from
one thread at a time (Megatron-LM overlaps them on separate NCCL streams).
"""

import time
from dataclasses import dataclass

from playground.collectives.tensor_allreduce import TensorAllReduce
from playground.training.checks import check_same_in_group, params_hash
from playground.training.modes import Mode
from playground.training.step import PhaseTimes, TrainSetup, reduce_and_update
from playground.transformer import Transformer
from playground.transformer.plan import StagePlan
from playground.transformer.tensor_plan import TensorPlan, split_of


@dataclass(frozen=True)
class TensorStepTimes(PhaseTimes):  # loss: this replica's share (the same on each of its shards)
    forward_s: float
    backward_s: float
    tensor_s: float  # the tensor all-reduces' own time, inside forward and backward
    tensor_calls: int
    comm_s: float  # the data-parallel mode's collectives the step waited for
    optimizer_s: float
    step_s: float


class TensorParallel:
    """Shard `grid.tensor_index` of replica `grid.data_index`: its model (every block, both ends, its
    slices of the split matrices), its tensor group's all-reduce, the data-parallel strategy of
    `mode` over `grid.data`; from the same start as one process."""

    def __init__(self, comm, grid, mode: Mode, setup: TrainSetup, algorithm: str = "auto"):
        self.comm, self.grid, self.mode, self.setup = comm, grid, mode, setup
        t = grid.shape.tensor
        self.plan = StagePlan.whole(setup.config, TensorPlan(grid.tensor_index, t))
        self.all_reduce = TensorAllReduce(grid.tensor, algorithm)
        self.model = Transformer(
            setup.config, seed=setup.seed, plan=self.plan, all_reduce=self.all_reduce if t > 1 else None
        )
        self.gradients = mode.gradients(grid.data, self.model, setup, owns_comm=False)
        self.replicated = [(s.offset, s.stop) for s in self.model.layout if split_of(s.name) is None]

    def train_step(self, step: int, inputs, targets, check=None) -> TensorStepTimes:
        """One step on this replica's rows; `check(loss, reductions)` runs between the reduction and
        the update, untimed."""
        tracer, gradients, model = self.comm.tracer, self.gradients, self.model

        def span(piece: str):
            return tracer.span(piece, cat="compute", mode=self.mode.name, step=step)

        pieces = gradients.unit_span(span)
        self.all_reduce.reset()
        t0 = time.perf_counter()
        gradients.begin(step)
        loss = model.forward(inputs, targets, loss_denominator=self.setup.global_tokens, span=pieces)
        t1 = time.perf_counter()
        model.backward(span=pieces)
        t2 = time.perf_counter()
        u = reduce_and_update(gradients, loss, check, span, model.layout)
        return TensorStepTimes(
            loss,
            t1 - t0,
            t2 - t1,
            self.all_reduce.seconds,
            self.all_reduce.calls,
            u.comm_s,
            u.optimizer_s,
            (t2 - t0) + u.comm_s + u.optimizer_s,
        )

    def check_shards(self, step: int, loss: float) -> None:
        """Every shard of the tensor group computed the same loss and holds the same replicated
        parameters after the update (CRC-32 of them), or ResultMismatch naming the shards."""
        mine = {"loss": loss, "hash": params_hash(self.gradients.held(self.replicated))}  # ZeRO-3: a shard
        where = f"replica {self.grid.data_index}"
        check_same_in_group(
            self.grid.tensor,
            self.comm.rank,
            step,
            mine,
            "loss or replicated parameters",
            "tensor shard",
            where,
        )

    def check_step(self, step: int, times: PhaseTimes) -> None:
        self.check_shards(step, times.loss)

    def close(self) -> None:
        self.gradients.close()
