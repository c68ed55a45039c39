"""A mixture of experts trained with expert parallelism: every block's MLP becomes `experts` experts
and a top-k router (`playground.transformer.moe`), the experts spread over an expert group of ranks,
each token sent to its experts' ranks and back with all-to-alls, data parallelism across the groups;
skewed routing workloads beside the balanced one; every run checked against one process.

The ranks form a replicas x expert-group grid (`playground.training.experts.grid`: `expert_parallel`
ranks a group, the expert index fastest). Every rank trains its own rows of the global batch; rank i
of a group holds experts i E/P .. (i+1) E/P - 1 of every block and the rest of the model whole. For
each routing workload (`workloads`: balanced, a hot expert, a hot rank, a hotspot moving each step)
and each way of moving the tokens (`permutes`: sorted by expert, or gathered in place), `steps` steps
from the same start; one process holding every expert trains on the whole batch beside each
workload, and every rank's parameters, losses, routing and drops are compared with it (`reference`).
`summarize` reports each step's loads (tokens per expert and per rank, max / mean, the drop rate),
the step and its split (router, permute, all-to-all, experts, un-permute) beside the model of the
all-to-alls and of the slowest rank's work, and the permutation's two ways side by side.
"""

from dataclasses import dataclass
from typing import Literal

from playground.collectives import registry
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.models.calibration import LinkSpec
from playground.training.experts import moe_report
from playground.training.experts.grid import ExpertGrid
from playground.training.experts.loop import one_process_moe, train_experts
from playground.training.experts.workloads import WORKLOADS
from playground.training.modes import DDP_LIKE, Mode
from playground.training.step import TrainingShape, TrainSetup
from playground.transformer import AdamConfig, BatchSampler, lecture_bytes, pin_blas_threads
from playground.transformer.moe import MoEConfig, check_expert_parallel

Algorithm = registry.AllreduceChoice
WorkloadName = Literal["balanced", "hot_expert", "hot_rank", "moving", "learned"]  # workloads.WORKLOADS


@dataclass(frozen=True)
class Params(TrainingShape):
    layers: int = 2  # transformer blocks, each with its own experts
    d_model: int = 64  # width of the residual stream; each expert is d -> 4d -> d
    heads: int = 4  # attention heads; must divide d_model
    context: int = 32  # tokens per sequence: capacity and the balancing loss are counted per sequence
    batch: int = 8  # the global batch in sequences, split over every rank
    steps: int = 3  # per workload and permutation (the first untimed)
    lr: float = 5e-3  # Adam's learning rate
    seed: int = 0  # initial weights and batch order: the same in every run and in one process
    dtype: Literal["float32", "float64"] = "float64"  # float64: equal to one process to rounding
    experts: int = 8  # E: experts per block
    top_k: int = 2  # experts per token
    capacity_factor: float | None = (
        None  # assignments per expert per sequence: ceil(cf T k / E); null: dropless
    )
    aux_loss_coef: float = 0.01  # the weight of Switch's load-balancing loss
    expert_parallel: int | None = (
        None  # P, ranks per expert group (dividing ranks and experts); null: every rank
    )
    # the routing workloads to run, each from the same start (training/experts/workloads.py)
    workloads: tuple[WorkloadName, ...] = ("balanced", "hot_expert", "hot_rank", "moving")
    # how tokens reach their experts: sorted by expert, or gathered in place (transformer/moe/permute.py)
    permutes: tuple[Literal["sorted", "gathered"], ...] = ("sorted", "gathered")
    mode: Mode = DDP_LIKE  # the gradients over the ranks that hold the same experts (the lab's modes)
    bucket_cap_mb: float = 25.0  # bucketed: DDP's bucket_cap_mb, in MiB
    first_bucket_mb: float | None = 1.0  # bucketed: the first bucket's cap; null: bucket_cap_mb
    algorithm: Algorithm = "ring"  # the data-parallel all-reduces
    alltoall_algorithm: registry.AlltoallvName = "scattered"  # the expert group's all-to-alls of rows
    reference: bool = True  # compare every rank with one process trained on the whole batch
    model: LinkSpec | None = (
        None  # the all-to-all model's link: a preset or a calibration.json; null: ./calibration.json
    )

    def __post_init__(self):
        config, moe = self.model_config, self.moe_config
        moe.check_tokens(config.context, "experts")
        for name in ("workloads", "permutes"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                raise ParamError(name, f"a non-empty list of distinct names, got {list(values)}")
        BatchSampler(lecture_bytes(), self.context, self.batch, self.seed)
        AdamConfig(lr=self.lr)
        if self.steps < 1:
            raise ParamError("steps", f"must be >= 1, got {self.steps}")
        if self.expert_parallel is not None:
            if self.expert_parallel < 1:
                raise ParamError("expert_parallel", f"must be >= 1 or null, got {self.expert_parallel}")
            check_expert_parallel(moe, self.expert_parallel)
        if not self.bucket_cap_mb > 0:
            raise ParamError("bucket_cap_mb", f"must be > 0 MiB, got {self.bucket_cap_mb}")

    @property
    def moe_config(self) -> MoEConfig:
        return MoEConfig(self.experts, self.top_k, self.capacity_factor, self.aux_loss_coef)

    def setup(self) -> TrainSetup:
        return TrainSetup.of(self)


def expert_parallel(params: Params, ranks: int) -> int:
    return params.expert_parallel or ranks


def check_scenario(params: Params, ranks: int) -> None:
    P = expert_parallel(params, ranks)
    if ranks % P:
        raise ParamError(
            "params.expert_parallel", f"{P} ranks per expert group must divide the run's {ranks} ranks"
        )
    check_expert_parallel(
        params.moe_config, P, "params.expert_parallel" if params.expert_parallel else "ranks"
    )
    if params.batch % ranks:
        raise ParamError(
            "params.batch", f"{ranks} ranks each train their own rows: they must divide {params.batch}"
        )


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # the ranks share the cores: one BLAS thread each
    setup, sampler, moe = params.setup(), params.sampler, params.moe_config
    grid = ExpertGrid(comm, expert_parallel(params, comm.size))
    runs: list[dict] = []
    total = len(params.workloads) * len(params.permutes) * params.steps
    for workload in (WORKLOADS[w] for w in params.workloads):
        reference = (
            one_process_moe(setup, sampler, params.steps, moe, workload, grid.expert_size)
            if params.reference
            else None
        )
        for permute in params.permutes:
            done = len(runs) * params.steps

            def tick(step: int, label=f"{workload.name} {permute}", done=done) -> None:
                comm.progress(done + step + 1, total, f"{label} step {step + 1}")

            runs.append(
                train_experts(
                    comm,
                    grid,
                    params.mode,
                    setup,
                    sampler,
                    params.steps,
                    moe,
                    workload,
                    permute,
                    params.alltoall_algorithm,
                    reference,
                    tick,
                )
            )
            comm.barrier()
    return {"ok": True, "runs": runs}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return moe_report.report(results, params, run_dir)


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # bucketed's communication thread
)
