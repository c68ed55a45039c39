"""Pipeline parallelism on the training lab's transformer: its blocks split over p stages, GPipe and
1F1B over m micro-batches, data parallel across the pipeline's replicas, every run checked against
one process; the bubble and the activations held measured against their formulas.

The ranks form a data x pipeline grid (`playground.comm.group.Grid`): rank r is stage
r // data of replica r % data. Each stage holds its blocks of the one model
(`playground.transformer.plan`: the first stage the embeddings, the last the head and the loss) and
sends activations forward and their gradients back over `grid.pipeline`; each replica's stage
all-reduces its gradients with the same stage of the others over `grid.data` in the training lab's
`mode`. For every schedule and micro-batch count, from the same start, `steps` steps; before them
each stage's forward and backward of one micro-batch is timed, the stages taking turns (the
compute of the step-time model); after them one process's training on the whole batch is compared
with every stage's parameters after every step (`reference`). `summarize` measures the bubble from
the trace, counts the activations held against the formulas, puts the model's step time beside the
measured one, draws each schedule, and with `baseline: pipelining` (`--baseline pipelining`) runs
the same training with torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over Gloo.
"""

from dataclasses import dataclass
from typing import Literal

from playground.collectives import registry
from playground.comm.group import Grid
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.models.calibration import LinkSpec
from playground.training.checkpointing import Checkpoints, check_policy, identity, with_checkpoints
from playground.training.modes import DDP_LIKE, Mode
from playground.training.pipeline import pipeline_report, torch_baseline
from playground.training.pipeline.loop import calibrate, reference_gaps, train_schedule
from playground.training.pipeline.schedules import SCHEDULES
from playground.training.pipeline.step import MAX_MICRO_BATCHES, TAG_TIED
from playground.training.step import TrainingShape, TrainSetup
from playground.transformer import AdamConfig, BatchSampler, lecture_bytes, pin_blas_threads
from playground.transformer.plan import pipeline_plan

Algorithm = registry.AllreduceChoice


@dataclass(frozen=True)
class Params(TrainingShape):
    layers: int = 4  # transformer blocks, split evenly over the stages
    d_model: int = 64  # width of the residual stream
    heads: int = 4  # attention heads; must divide d_model
    context: int = 32  # bytes (tokens) per sequence
    batch: int = 32  # the global batch in sequences: split over the replicas, then into micro-batches
    steps: int = 3  # optimizer steps of each schedule at each micro-batch count (the first untimed)
    lr: float = 5e-3  # Adam's learning rate
    seed: int = 0  # initial weights and batch order: the same in every run
    dtype: Literal["float32", "float64"] = "float64"  # float64: equal to one process to rounding
    pipeline: int = 4  # stages p; must divide layers
    data: int | None = None  # replicas of the pipeline; null: ranks / pipeline
    schedule: tuple[Literal["gpipe", "1f1b"], ...] = ("gpipe", "1f1b")  # each run in turn
    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16)  # m, each must divide a replica's rows
    mode: Mode = DDP_LIKE  # the gradients' reduction across replicas (the training lab's modes)
    bucket_cap_mb: float = 25.0  # bucketed: DDP's bucket_cap_mb, in MiB
    first_bucket_mb: float | None = 1.0  # bucketed: the first bucket's cap; null: bucket_cap_mb
    algorithm: Algorithm = "ring"  # the replicas' all-reduce
    calibration_repeats: int = 3  # timings of each stage's forward and backward (median)
    reference: bool = True  # compare every stage with one process trained on the whole batch
    # the step-time model's link: a preset or a calibration.json of `calibrate`; null: this machine's
    # calibration (./calibration.json), else a labelled default
    model: LinkSpec | None = None
    baseline: Literal["pipelining"] | None = None  # torch.distributed.pipelining over Gloo beside ours
    checkpoint_every: int = 0  # save a checkpoint every this many steps (and at each run's end); 0: none
    checkpoint_async: bool = True  # written by a thread while the steps go on; false: the step waits for it
    checkpoint_keep: int = 2  # the newest whole checkpoints kept in the run directory

    def __post_init__(self):
        pipeline_plan(self.model_config, self.pipeline)  # ParamError naming pipeline
        BatchSampler(lecture_bytes(), self.context, self.batch, self.seed)
        AdamConfig(lr=self.lr)
        for key in ("steps", "calibration_repeats"):
            if getattr(self, key) < 1:
                raise ParamError(key, f"must be >= 1, got {getattr(self, key)}")
        if self.data is not None and self.data < 1:
            raise ParamError("data", f"must be >= 1 or null (ranks / pipeline), got {self.data}")
        if not self.schedule or len(set(self.schedule)) != len(self.schedule):
            raise ParamError("schedule", f"a non-empty list of {', '.join(SCHEDULES)} without repeats")
        bad = [m for m in self.micro_batches if not 1 <= m <= MAX_MICRO_BATCHES]
        if not self.micro_batches or bad or len(set(self.micro_batches)) != len(self.micro_batches):
            raise ParamError(
                "micro_batches",
                f"a non-empty list of distinct counts in 1..{MAX_MICRO_BATCHES}, got {list(self.micro_batches)}",
            )
        if not self.bucket_cap_mb > 0:
            raise ParamError("bucket_cap_mb", f"must be > 0 MiB, got {self.bucket_cap_mb}")
        check_policy(self)

    def replicas(self, ranks: int) -> int:
        return self.data if self.data is not None else max(1, ranks // self.pipeline)

    def setup(self) -> TrainSetup:
        return TrainSetup.of(self)


def check_scenario(params: Params, ranks: int) -> None:
    data, p = params.replicas(ranks), params.pipeline
    if data * p != ranks:
        key = "params.data" if params.data is not None else "params.pipeline"
        raise ParamError(
            key, f"a grid of data {data} x pipeline {p} = {data * p} ranks, but the run has {ranks} ranks"
        )
    rows = params.batch / data
    odd = [m for m in params.micro_batches if rows % m]
    if odd:
        raise ParamError(
            "params.micro_batches",
            f"each count must divide a replica's rows: batch {params.batch} / data {data} = {rows:g}; "
            f"{', '.join(map(str, odd))} do not",
        )
    if params.baseline == "pipelining":  # torch's own limits first: they hold with or without torch here
        few = [m for m in params.micro_batches if m < p]
        if "1f1b" in params.schedule and few:
            raise ParamError(
                "params.micro_batches",
                f"torch's Schedule1F1B needs at least p = {p} micro-batches, got {', '.join(map(str, few))} "
                "(ours runs them: 1F1B is then GPipe)",
            )
        missing = torch_baseline.available()
        if missing:
            raise ParamError("params.baseline", f"pipelining needs PyTorch: {missing}")


def checkpoint_identity(params: Params, ranks: int) -> dict:
    """What a checkpoint must match to be gone on from: the ranks and every key that trains."""
    return identity("nodes.train_pipeline", params, ranks, ("calibration_repeats", "model", "baseline"))


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # the ranks share the cores: one BLAS thread each
    grid = Grid(comm, data=params.replicas(comm.size), pipeline=params.pipeline)
    config, setup, sampler = params.model_config, params.setup(), params.sampler
    plan = pipeline_plan(config, params.pipeline)[grid.pipeline_index]
    rows = params.batch // grid.shape.data
    calibration = {
        m: calibrate(comm, grid, plan, setup, sampler, rows // m, params.calibration_repeats)
        for m in params.micro_batches
    }
    # every replica takes the snapshots (ZeRO-3's is an all-gather over the data group); one compares
    keep = params.reference and grid.data_index == 0
    checkpoints = Checkpoints.open(comm, params, checkpoint_identity(params, comm.size))
    runs, kept = [], []
    combos = [(SCHEDULES[s], m) for s in params.schedule for m in params.micro_batches]
    total = len(combos) * params.steps
    for run, (schedule, m) in enumerate(combos):

        def tick(step: int, run=run, schedule=schedule, m=m) -> None:
            comm.progress(run * params.steps + step + 1, total, f"{schedule.name} m={m} step {step + 1}")

        record, snapshots = train_schedule(
            comm,
            grid,
            plan,
            params.mode,
            setup,
            sampler,
            params.steps,
            schedule,
            m,
            run,
            params.reference,
            tick,
            checkpoints,
        )
        runs.append(record)
        kept.append(([s["loss"] for s in record["steps"]], snapshots))
    if keep:
        for record, gaps in zip(runs, reference_gaps(setup, sampler, plan, params.steps, kept), strict=True):
            record["reference"] = gaps
    return {
        "ok": True,
        "stage": plan.stage,
        "data_index": grid.data_index,
        "plan": plan.describe(),
        "pipeline_tags": [
            grid.pipeline.tag_offset,
            grid.pipeline.tag_offset + TAG_TIED,
        ],  # its stages' messages
        "calibration": {str(m): c for m, c in calibration.items()},
        "activation_bytes": {
            str(m): plan.activation_bytes(config, rows // m, config.context) for m in params.micro_batches
        },
        "runs": runs,
        "checkpoints": checkpoints.close(),
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    torch_records = (
        torch_baseline.run(params, len(results), run_dir) if params.baseline == "pipelining" else None
    )
    report = pipeline_report.report(results, params, run_dir, torch_records)
    return with_checkpoints(report, results, params.checkpoint_every)


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # bucketed's communication thread
    checkpoint_identity=checkpoint_identity,
)
