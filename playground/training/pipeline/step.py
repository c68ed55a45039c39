"""One training step of a pipeline stage on a data x pipeline grid, timed phase by phase.

    pipeline:  this stage's schedule over the m micro-batches of its replica's rows (`stage`),
               gradients accumulated over the micro-batches, each micro-batch's loss divided by the
               global batch's token count (so the sum over micro-batches and replicas is the
               global mean, and the update is one process's)
    tied:      the first and the last stage both hold wte (the embedding and the tied output
               layer); each sends the other its part of wte's gradient and adds the other's
               (a + b = b + a in floating point: both get the same bits)
    data:      the data-parallel mode's strategy over `grid.data` (the training lab's `Mode`:
               bucketed, after_backward, per_tensor all-reduce the stage's gradients; zero1 and
               zero2 reduce-scatter them and all-gather the updated shard; zero3 keeps only its
               shard of the stage's units and gathers each before a micro-batch's piece reads it),
               then Adam
    checks:    the training lab's: every reduction against the replicas' checksums, every replica
               of a stage bit-identical after the update; and the two copies of wte bit-identical

The data-parallel all-reduces start after the pipeline's flush, not during the last micro-batch's
backward as DDP overlaps them: one communicator serves both groups and is used from one thread at a
time, and the pipeline's own sends run on the main thread until the stage's last backward ends.
For the same reason ZeRO-3's gathers run when a piece asks for them (no prefetch), once per
micro-batch's forward and backward (torchtitan keeps the units whole across the micro-batches
instead: `reshard_after_forward` off), and ZeRO-2 and ZeRO-3 reduce-scatter the accumulated
gradients once after the flush.
"""

import time
from dataclasses import dataclass

import numpy as np

from playground.core.errors import ResultMismatch
from playground.training.checks import params_hash
from playground.training.modes import Mode
from playground.training.pipeline.schedules import ScheduleKind
from playground.training.pipeline.stage import Stage
from playground.training.step import PhaseTimes, TrainerBuffers, TrainSetup, reduce_and_update
from playground.transformer import Transformer
from playground.transformer.plan import StagePlan

MAX_MICRO_BATCHES = 4096  # the stages' tags are 2 i and 2 i + 1, below the tied embedding's
TAG_TIED = 2 * MAX_MICRO_BATCHES  # its gradient; TAG_TIED + 1: its hash after the update


@dataclass(frozen=True)
class PipelineStepTimes(PhaseTimes):  # loss: this rank's share (the last stage's; 0 elsewhere)
    pipeline_s: float
    tied_s: float
    comm_s: float
    optimizer_s: float
    step_s: float
    peak_bytes: int
    peak_micro_batches: int


class PipelineParallel:
    """Stage `plan.stage` of replica `grid.data_index`: its model, its schedule, the data-parallel
    strategy of `mode` over `grid.data`, all from the same start as one process."""

    def __init__(
        self,
        comm,
        grid,
        plan: StagePlan,
        mode: Mode,
        setup: TrainSetup,
        schedule: ScheduleKind,
        num_micro_batches: int,
        run: int = 0,
    ):
        self.comm, self.grid, self.plan, self.setup = comm, grid, plan, setup
        self.num_micro_batches, self.run = (
            num_micro_batches,
            run,
        )  # run: which of the node's, in the tags and trace
        self.model = Transformer(setup.config, seed=setup.seed, plan=plan)
        self.buffers = TrainerBuffers(
            self.model.params, np.zeros_like(self.model.params), self.model.layout, self.model.p
        )
        self.gradients = mode.gradients(grid.data, self.buffers, setup, owns_comm=False)
        self.stage = Stage(comm, grid.pipeline, self.model, self.buffers.grads, self.gradients.unit_span)
        self.actions = schedule.build(plan.num_stages, num_micro_batches)[plan.stage]
        wte = self.model.layout["wte"] if plan.holds_wte else None
        self.wte = None if wte is None else (wte.offset, wte.stop)

    def micro_batches(self, inputs: np.ndarray, targets: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = inputs.shape[0] // self.num_micro_batches
        return [
            (inputs[i * rows : (i + 1) * rows], targets[i * rows : (i + 1) * rows])
            for i in range(self.num_micro_batches)
        ]

    def _tie(self) -> None:
        partner = self.plan.tied_partner
        if partner is None:
            return
        assert self.wte is not None
        mine = self.buffers.grads[slice(*self.wte)]
        with self.comm.collective(
            f"pipeline stage {self.plan.stage}: the tied embedding's gradient with stage {partner}"
        ):
            other = self.grid.pipeline.sendrecv(mine, partner, partner, TAG_TIED)
        mine += other

    def check_tied(self, step: int) -> None:
        """The two copies of wte must be bit-identical after the update."""
        partner = self.plan.tied_partner
        if partner is None:
            return
        assert self.wte is not None
        digest = params_hash(self.gradients.held([self.wte]))  # ZeRO-3: its shard of wte
        group = self.grid.pipeline
        group.send_obj(digest, partner, TAG_TIED + 1)
        theirs = group.recv_obj(partner, TAG_TIED + 1)
        if theirs != digest:
            raise ResultMismatch(
                self.comm.rank,
                f"step {step}: the tied embedding differs between stage {self.plan.stage} ({digest}) and "
                f"stage {partner} ({theirs}) after the update",
            )

    def train_step(self, step: int, inputs, targets, check=None) -> PipelineStepTimes:
        """One step on this replica's rows (`inputs`, `targets`: (rows, T)); `check(loss, reductions)`
        runs between the reduction and the update, untimed."""
        gradients = self.gradients
        t0 = time.perf_counter()
        gradients.begin(step)
        result = self.stage.run(
            self.actions, self.micro_batches(inputs, targets), self.setup.global_tokens, step, self.run
        )
        t1 = time.perf_counter()
        self._tie()
        t2 = time.perf_counter()
        u = reduce_and_update(gradients, result.loss, check, layout=self.model.layout)
        return PipelineStepTimes(
            result.loss,
            t1 - t0,
            t2 - t1,
            u.comm_s,
            u.optimizer_s,
            (t2 - t0) + u.comm_s + u.optimizer_s,
            result.peak_bytes,
            result.peak_micro_batches,
        )

    def check_step(self, step: int, times: PhaseTimes) -> None:
        self.check_tied(step)

    def close(self) -> None:
        self.gradients.close()
