"""One training step of an expert-parallel rank on a replicas x expert-group grid, timed phase by phase.

    forward:   this rank's rows (its 1/N of the global batch); every block's MLP is the MoE layer:
               router, permute, all-to-all over `grid.expert`, this rank's experts, all-to-all back,
               un-permute; the loss adds the balancing loss; both are divided by the global batch's
               token count, so the sum over all N ranks is the global mean
    backward:  the same all-to-alls in reverse; the rank's gradients: the router's and the rest of
               the model from its own rows, its experts' from every row its group sent them
    expert:    the gradients outside the experts summed over `grid.expert` (one in-place all-reduce
               of that contiguous part of the buffer: the experts lead the layout)
    data:      the training lab's mode over `grid.expert_data` on the whole buffer: the experts'
               gradients summed over the ranks that hold them, the rest completed over the grid;
               then Adam
    checks:    the training lab's over `grid.expert_data` (whose ranks hold identical parameters);
               and over `grid.expert`, that the group's ranks hold bit-identical parameters outside
               the experts after the update

The step's split (`PHASES`: router, permute, all-to-all, experts, un-permute) is the MoE layer's clock,
forward and backward together; the all-to-all's share includes the wait for the slowest rank of the
group, whose experts got the most rows. Each step also records what it routed (`Loads`) and the bytes
of every all-to-all (`exchange.ExpertAllToAll.calls`).

As in tensor parallelism, the data-parallel reductions start after backward: the all-to-alls run
inside backward on the main thread, and one communicator serves one thread at a time. The rank's
gradients stay whole (the expert group's sum needs them): ZeRO-2 and ZeRO-3 reduce-scatter their
units from them after backward, and ZeRO-3 gathers a piece's units (a block's experts among them)
on the main thread before the piece.
"""

import time
from dataclasses import dataclass, field

from playground.collectives import allreduce
from playground.training.checks import check_same_in_group, params_hash
from playground.training.experts.exchange import ExpertAllToAll
from playground.training.experts.workloads import Workload
from playground.training.modes import Mode
from playground.training.step import PhaseTimes, TrainerBuffers, TrainSetup, reduce_and_update
from playground.transformer import Transformer
from playground.transformer.moe import ExpertPlan, MoEConfig, is_expert
from playground.transformer.plan import StagePlan


@dataclass(frozen=True)
class MoEStepTimes(PhaseTimes):  # loss: this rank's share (cross-entropy and balancing loss)
    forward_s: float
    backward_s: float
    router_s: float
    permute_s: float
    alltoall_s: float
    experts_s: float
    unpermute_s: float
    expert_group_s: float  # the gradients outside the experts, summed over the expert group
    comm_s: float  # the data-parallel mode's collectives the step waited for
    optimizer_s: float
    step_s: float
    aux_loss: float  # this rank's share of the balancing loss
    routed: list = field(default_factory=list)  # per block: this rank's assignments per expert
    kept: list = field(default_factory=list)  # per block: of them, kept under the capacity
    received: list = field(default_factory=list)  # per block: rows this rank's experts computed
    exchanges: list = field(default_factory=list)  # per all-to-all: [bytes out, bytes in, seconds]


def moe_plan(setup: TrainSetup, moe: MoEConfig, grid) -> StagePlan:
    return StagePlan.whole(setup.config, experts=ExpertPlan(moe, grid.expert_index, grid.expert_size))


class ExpertParallel:
    """Rank `grid.expert_index` of its expert group: its model (every block's router, its experts, the
    rest whole), its group's all-to-all, the mode's strategy over `grid.expert_data`; from the same
    start as one process. `workload` pushes the routing each step; `permute`: sorted or gathered."""

    def __init__(
        self,
        comm,
        grid,
        mode: Mode,
        setup: TrainSetup,
        moe: MoEConfig,
        workload: Workload,
        permute: str = "sorted",
        algorithm: str = "scattered",
    ):
        self.comm, self.grid, self.mode, self.setup, self.moe, self.workload = (
            comm,
            grid,
            mode,
            setup,
            moe,
            workload,
        )
        self.plan = moe_plan(setup, moe, grid)
        self.exchange = ExpertAllToAll(grid.expert, algorithm) if grid.expert_size > 1 else None
        self.model = Transformer(
            setup.config, seed=setup.seed, plan=self.plan, exchange=self.exchange, permute=permute
        )
        model = self.model  # its gradients stay whole: summed over the expert group before the modes
        buffers = TrainerBuffers(model.params, model.grads, model.layout, model.p)
        self.gradients = mode.gradients(grid.expert_data, buffers, setup, owns_comm=False)
        first_dense = next(s.offset for s in model.layout if not is_expert(s.name))
        self.dense = slice(first_dense, model.params.size)  # everything outside the experts

    def train_step(self, step: int, inputs, targets, check=None) -> MoEStepTimes:
        """One step on this rank's rows; `check(loss, reductions)` runs between the reduction and the
        update, untimed, with the expert group's summed loss."""
        tracer, model, grid, moe = self.comm.tracer, self.model, self.grid, self.model.moe
        assert moe is not None  # a plan with experts

        def span(piece: str):
            return tracer.span(piece, cat="compute", mode=self.mode.name, step=step)

        pieces = self.gradients.unit_span(span)  # ZeRO-3: a piece's units gathered before it
        moe.begin(
            self.workload.bias(step, inputs.shape[1], self.moe.experts, self.moe.top_k, grid.expert_size)
        )
        if self.exchange is not None:
            self.exchange.reset()
        t0 = time.perf_counter()
        self.gradients.begin(step)
        loss = model.forward(inputs, targets, loss_denominator=self.setup.global_tokens, span=pieces)
        t1 = time.perf_counter()
        model.backward(span=pieces)
        t2 = time.perf_counter()
        group_loss = loss
        if grid.expert_size > 1:
            with tracer.span("moe.expert_group.allreduce", cat="comm", step=step):
                allreduce(grid.expert, model.grads[self.dense], algorithm=self.setup.algorithm, inplace=True)
            group_loss = float(sum(grid.expert.allgather_obj(loss)))
        t3 = time.perf_counter()
        u = reduce_and_update(self.gradients, group_loss, check, span, model.layout)
        phases = moe.clock.reset()
        return MoEStepTimes(
            loss,
            forward_s=t1 - t0,
            backward_s=t2 - t1,
            router_s=phases["router"],
            permute_s=phases["permute"],
            alltoall_s=phases["alltoall"],
            experts_s=phases["experts"],
            unpermute_s=phases["unpermute"],
            expert_group_s=t3 - t2,
            comm_s=u.comm_s,
            optimizer_s=u.optimizer_s,
            step_s=(t3 - t0) + u.comm_s + u.optimizer_s,
            aux_loss=moe.aux_share,
            **moe.loads.record(),
            exchanges=self.exchange.reset() if self.exchange is not None else [],
        )

    def check_step(self, step: int, times) -> None:
        """The expert group's ranks hold the same parameters outside the experts after the update
        (CRC-32 of them), or ResultMismatch naming the ranks."""
        if self.grid.expert_size == 1:
            return
        mine = params_hash(self.gradients.held([(self.dense.start, self.dense.stop)]))  # ZeRO-3: a shard
        where = f"expert group {self.grid.replica}"
        check_same_in_group(
            self.grid.expert, self.comm.rank, step, mine, "the parameters outside the experts", "rank", where
        )

    def close(self) -> None:
        self.gradients.close()
