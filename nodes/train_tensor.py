"""Tensor parallelism (Megatron-LM) on the training lab's transformer: each block's attention heads
and MLP units split over t ranks, two all-reduces per block forward and two backward; on the same
ranks, t against data parallelism; every run checked against one process.

For each t in `tensor`, the ranks form a data x tensor grid (`playground.comm.group.Grid`, the
tensor index fastest: rank r is shard r % t of replica r // t). Each shard holds its slices of the
split matrices (`playground.transformer.tensor_plan`: c_attn and c_fc by columns, the two c_proj by
rows) and every replicated parameter, and all-reduces each block's partial products over
`grid.tensor`; the replicas all-reduce their shards' gradients over `grid.data` in the training
lab's `mode`. From the same start, `steps` steps per t; after them one process's training on the
whole batch is compared with every shard's parameters after every step (`reference`). `summarize`
puts each t's step and phases beside the model (compute / t + alpha-beta all-reduces), draws step
time against t, and with `baseline: tensor_parallel` (`--baseline tensor_parallel`) trains the same
model on the same batches with torch.distributed.tensor.parallel over Gloo.
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
from playground.training.loop import one_process
from playground.training.modes import DDP_LIKE, Mode
from playground.training.step import TrainingShape, TrainSetup
from playground.training.tensor import tensor_report, torch_baseline
from playground.training.tensor.loop import train_tensor
from playground.transformer import AdamConfig, BatchSampler, lecture_bytes, pin_blas_threads
from playground.transformer.tensor_plan import check_tensor

Algorithm = registry.AllreduceChoice


@dataclass(frozen=True)
class Params(TrainingShape):
    layers: int = 2  # transformer blocks
    d_model: int = 64  # width of the residual stream
    heads: int = 4  # attention heads: t must divide them
    context: int = 32  # bytes (tokens) per sequence
    batch: int = 8  # the global batch in sequences, split over the data-parallel replicas
    steps: int = 3  # optimizer steps at each t (the first untimed)
    lr: float = 5e-3  # Adam's learning rate
    seed: int = 0  # initial weights and batch order: the same in every run
    dtype: Literal["float32", "float64"] = "float64"  # float64: equal to one process to rounding
    tensor: tuple[int, ...] | None = None  # t of each run, dividing ranks and heads; null: every such t
    mode: Mode = DDP_LIKE  # the shards' gradients across replicas (the training lab's modes)
    bucket_cap_mb: float = 25.0  # bucketed: DDP's bucket_cap_mb, in MiB
    first_bucket_mb: float | None = 1.0  # bucketed: the first bucket's cap; null: bucket_cap_mb
    algorithm: Algorithm = "ring"  # the replicas' all-reduce
    tensor_algorithm: Algorithm = "auto"  # the shards' all-reduce of each block's activations
    reference: bool = True  # compare every shard with one process trained on the whole batch
    # the step-time model's link: a preset or a calibration.json of `calibrate`; null: this machine's
    # calibration (./calibration.json), else a labelled default
    model: LinkSpec | None = None
    baseline: Literal["tensor_parallel"] | None = (
        None  # torch.distributed.tensor.parallel over Gloo beside ours
    )
    checkpoint_every: int = 0  # save a checkpoint every this many steps (and at each run's end); 0: none
    checkpoint_async: bool = True  # written by a thread while the steps go on; false: the step waits for it
    checkpoint_keep: int = 2  # the newest whole checkpoints kept in the run directory

    def __post_init__(self):
        config = self.model_config
        for t in self.tensor or ():
            check_tensor(config, t, "tensor")
        if self.tensor is not None and (not self.tensor or len(set(self.tensor)) != len(self.tensor)):
            raise ParamError("tensor", f"a non-empty list of distinct t, or null, got {list(self.tensor)}")
        BatchSampler(lecture_bytes(), self.context, self.batch, self.seed)
        AdamConfig(lr=self.lr)
        if self.steps < 1:
            raise ParamError("steps", f"must be >= 1, got {self.steps}")
        if not self.bucket_cap_mb > 0:
            raise ParamError("bucket_cap_mb", f"must be > 0 MiB, got {self.bucket_cap_mb}")
        check_policy(self)

    def sizes(self, ranks: int) -> tuple[int, ...]:
        """The t of each run: `tensor`, or every t dividing both the ranks and the heads."""
        if self.tensor is not None:
            return self.tensor
        return tuple(t for t in range(1, ranks + 1) if ranks % t == 0 and self.heads % t == 0)

    def setup(self) -> TrainSetup:
        return TrainSetup.of(self)


def check_scenario(params: Params, ranks: int) -> None:
    for t in params.sizes(ranks):
        if ranks % t:
            raise ParamError(
                "params.tensor",
                f"t = {t} needs a grid of data x tensor = {ranks} ranks, and {t} does not divide {ranks}"
                + (f" (a grid of {t} ranks is larger than the run's {ranks})" if t > ranks else ""),
            )
        data = ranks // t
        if params.batch % data:
            raise ParamError(
                "params.batch",
                f"t = {t} leaves {data} data-parallel replicas, which must divide the batch of {params.batch}",
            )
    if params.baseline == "tensor_parallel":
        missing = torch_baseline.available()
        if missing:
            raise ParamError("params.baseline", f"tensor_parallel needs PyTorch: {missing}")


def checkpoint_identity(params: Params, ranks: int) -> dict:
    """What a checkpoint must match to be gone on from: the ranks and every key that trains."""
    return identity("nodes.train_tensor", params, ranks, ("model", "baseline"))


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # the ranks share the cores: one BLAS thread each
    setup, sampler, sizes = params.setup(), params.sampler, params.sizes(comm.size)
    reference = one_process(setup, sampler, params.steps) if params.reference else None
    checkpoints = Checkpoints.open(comm, params, checkpoint_identity(params, comm.size))
    runs = []
    for k, t in enumerate(sizes):
        grid = Grid(comm, data=comm.size // t, tensor=t)

        def tick(step: int, k=k, t=t) -> None:
            comm.progress(k * params.steps + step + 1, len(sizes) * params.steps, f"t={t} step {step + 1}")

        runs.append(
            train_tensor(
                comm,
                grid,
                params.mode,
                setup,
                sampler,
                params.steps,
                params.tensor_algorithm,
                reference,
                tick,
                checkpoints,
            )
        )
        comm.barrier()
    return {"ok": True, "runs": runs, "checkpoints": checkpoints.close()}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    torch_records = (
        torch_baseline.run(params, len(results), run_dir) if params.baseline == "tensor_parallel" else None
    )
    report = tensor_report.report(results, params, run_dir, torch_records)
    return with_checkpoints(report, results, params.checkpoint_every)


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # bucketed's communication thread
    checkpoint_identity=checkpoint_identity,
)
