"""Data-parallel training of a real model: DDP's buckets and overlap, ZeRO-1, -2 and -3 (FSDP),
PyTorch DDP and FSDP2 beside it.

Every rank builds the same GPT-2 shaped byte-level transformer (numpy, backward by hand:
playground.transformer) from the same seed, takes its rows of each global batch of the lecture's
text, and trains it for `steps` steps in each `mode` (playground.training.modes), starting each
mode from the same weights. After every step the ranks compare their parameters' hashes and check
every reduction against their own checksums: a mismatch fails the run naming the step and the
ranks. ZeRO-2 and ZeRO-3 cut the model into units of `unit_blocks` blocks, gathered `prefetch`
units ahead (ZeRO-3), freed after forward unless `reshard_after_forward` is off; `micro_batches`
splits a rank's rows into passes whose gradients accumulate. At the end rank 0 saves the weights
(model.npz, which the serving lab loads) and writes `sample_bytes` bytes after `prompt` (greedily
at temperature 0), shown as text
(`playground.transformer.text`: whole characters) with how much of it is the lecture's. With
`baseline: ddp` (`run train --baseline ddp`), the launcher then trains the same model on the same
batches with torch DDP over Gloo, in its own worker processes, and the report puts the two side
by side; `baseline: fsdp` does the same with torch's FSDP2 (`fully_shard` per block), beside zero3.

`run train` trains one mode (bucketed, DDP's) long enough to learn the lecture's text;
`run train-modes` trains the six modes briefly from the same start, to compare them.
"""

from dataclasses import asdict, dataclass, replace
from typing import Literal

from playground.collectives import registry
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.models.calibration import LinkSpec
from playground.training import ddp_baseline, fsdp_baseline, training_report
from playground.training.checkpointing import Checkpoints, check_policy, identity, with_checkpoints
from playground.training.loop import train_mode
from playground.training.modes import MODES, NAMES, Mode
from playground.training.step import TrainingShape, TrainSetup
from playground.training.units import Sharding
from playground.transformer import (
    AdamConfig,
    LRSchedule,
    Transformer,
    decode_sample,
    generate,
    lecture_bytes,
    lecture_likeness,
    pin_blas_threads,
    save_model,
)

Algorithm = registry.AllreduceChoice


@dataclass(frozen=True)
class Params(TrainingShape):
    layers: int = 2  # transformer blocks
    d_model: int = 64  # width of the residual stream
    heads: int = 4  # attention heads; must divide d_model
    context: int = 64  # bytes (tokens) per sequence; shorter than the lecture's text
    batch: int = 32  # the global batch in sequences, split evenly over the ranks
    steps: int = 50  # optimizer steps of every mode
    lr: float = 5e-3  # Adam's learning rate (the peak, with a schedule)
    warmup_steps: int = 0  # the rate rises linearly to lr over these first steps
    min_lr: float | None = None  # cosine decay from lr to this at the last step; null: constant lr
    seed: int = 0  # initial weights and batch order: the same on every rank and in every mode
    dtype: Literal["float32", "float64"] = "float32"  # parameters, gradients, activations, Adam's states
    # the data-parallel schemes to run, one after another, each from the same start
    mode: tuple[Mode, ...] = MODES
    bucket_cap_mb: float = 25.0  # bucketed: DDP's bucket_cap_mb, in MiB
    first_bucket_mb: float | None = 1.0  # bucketed: the first bucket's cap (DDP's 1 MiB); null: bucket_cap_mb
    algorithm: Algorithm = (
        "ring"  # the gradients' all-reduce (zero1-3 use the ring reduce-scatter and all-gather)
    )
    unit_blocks: int = 1  # zero2, zero3: blocks per unit (FSDP's fully_shard per block); 0: one unit of all
    prefetch: int = 1  # zero3: units all-gathered ahead of the one in use (FSDP2's 1); 0: when needed
    reshard_after_forward: bool = True  # zero3: free a unit after its forward, gather it again for backward
    micro_batches: int = 1  # passes over a rank's rows per step, gradients accumulated over them
    sample_bytes: int = 200  # bytes rank 0 writes with the trained model at the end
    prompt: str = "分页"  # what the sample continues: words of the lecture ("paging")
    temperature: float = 0.0  # 0: greedy (the most likely byte each time); > 0: sampled with `seed`
    # the step-time model's link: a preset or a calibration.json of `calibrate`; null: this machine's
    # calibration (./calibration.json), else a labelled default
    model: LinkSpec | None = None
    # ddp: the same training with PyTorch DDP over Gloo beside ours; fsdp: with FSDP2's fully_shard
    baseline: Literal["ddp", "fsdp"] | None = None
    checkpoint_every: int = 0  # save a checkpoint every this many steps (and at each mode's end); 0: none
    checkpoint_async: bool = True  # written by a thread while the steps go on; false: the step waits for it
    checkpoint_keep: int = 2  # the newest whole checkpoints kept in the run directory

    def __post_init__(self):
        self.model_config  # noqa: B018 - raises ParamError naming layers, heads, ...
        self.sampler  # noqa: B018 - context longer than the text, batch < 1
        AdamConfig(lr=self.lr)
        self.schedule  # noqa: B018 - warmup_steps < 0, min_lr above lr
        if self.steps < 1:
            raise ParamError("steps", f"must be >= 1, got {self.steps}")
        if not self.mode or len(set(self.mode)) != len(self.mode):
            raise ParamError(
                "mode",
                f"a non-empty list of {', '.join(NAMES)} without repeats, got {[m.name for m in self.mode]}",
            )
        self.sharding  # noqa: B018 - unit_blocks < 0, prefetch < 0
        if any(m.stage >= 2 for m in self.mode):
            self.sharding.check_model(self.layers)
        if self.micro_batches < 1:
            raise ParamError("micro_batches", f"must be >= 1, got {self.micro_batches}")
        if not self.bucket_cap_mb > 0:
            raise ParamError("bucket_cap_mb", f"must be > 0 MiB, got {self.bucket_cap_mb}")
        if self.first_bucket_mb is not None and not self.first_bucket_mb > 0:
            raise ParamError("first_bucket_mb", f"must be > 0 MiB or null, got {self.first_bucket_mb}")
        if self.sample_bytes < 0:
            raise ParamError("sample_bytes", f"must be >= 0, got {self.sample_bytes}")
        if not self.prompt:
            raise ParamError("prompt", "must be at least one character")
        try:
            self.prompt.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ParamError(
                "prompt", f"must be text that UTF-8 can encode, got {e.object[e.start : e.end]!r}"
            ) from None
        if not self.temperature >= 0:
            raise ParamError("temperature", f"must be >= 0 (0: greedy), got {self.temperature}")
        check_policy(self)

    @property
    def schedule(self) -> LRSchedule:
        return LRSchedule(self.lr, self.steps, self.warmup_steps, self.min_lr)

    @property
    def sharding(self) -> Sharding:
        return Sharding(self.unit_blocks, self.prefetch, self.reshard_after_forward)

    def setup(self) -> TrainSetup:
        return replace(
            TrainSetup.of(self, self.schedule), sharding=self.sharding, micro_batches=self.micro_batches
        )


def check_scenario(params: Params, ranks: int) -> None:
    if params.batch % ranks:
        raise ParamError(
            "params.batch", f"the global batch {params.batch} must be divisible by the {ranks} ranks"
        )
    if (params.batch // ranks) % params.micro_batches:
        raise ParamError(
            "params.micro_batches",
            f"must divide a rank's {params.batch // ranks} rows (batch {params.batch} / {ranks} ranks), "
            f"got {params.micro_batches}",
        )
    if params.baseline is not None:
        missing = ddp_baseline.available()
        if missing:
            raise ParamError("params.baseline", f"{params.baseline} needs PyTorch: {missing}")


def checkpoint_identity(params: Params, ranks: int) -> dict:
    """What a checkpoint must match to be gone on from: the ranks and every key that trains."""
    return identity("nodes.train", params, ranks, NOT_TRAINING)


REPLICATED = ("per_tensor", "bucketed", "after_backward")  # every rank holds the whole state


def live_recovery(params: Params, ranks: int, way: str) -> None:
    """`recovery.way: peer` and `shrink` need one mode whose every rank holds the whole state (a
    survivor then has all a replacement, or the smaller group, needs); the sharded modes are
    refused (ParamError). A shrunk group writes no checkpoints: its parts would never make a whole
    one of the run's world size, so shrink refuses `checkpoint_every`."""
    refused = [m.name for m in params.mode if m.name not in REPLICATED]
    if refused or len(params.mode) != 1:
        raise ParamError(
            "recovery.way",
            f"{way} needs params.mode to be one of {', '.join(REPLICATED)} (a survivor holds the whole "
            f"state), got {[m.name for m in params.mode]}; allowed otherwise: restart",
        )
    if way == "shrink" and params.checkpoint_every:
        raise ParamError(
            "recovery.way",
            "shrink needs params.checkpoint_every=0 (a shrunk group's checkpoint would not fit the run)",
        )
    if way == "shrink" and ranks < 2:
        raise ParamError("recovery.way", "shrink needs at least 2 ranks (one must survive)")


NOT_TRAINING = ("sample_bytes", "prompt", "temperature", "model", "baseline")  # a resumed run may change them


def main(comm, params: Params) -> dict:
    pin_blas_threads(1)  # N ranks share the cores: one BLAS thread each
    setup, sampler, steps = params.setup(), params.sampler, params.steps
    checkpoints = Checkpoints.open(comm, params, checkpoint_identity(params, comm.size))
    total = len(params.mode) * steps
    modes, dp = [], None
    for k, mode in enumerate(params.mode):
        dp = None  # the previous mode's buffers go before this mode's are made

        def tick(step: int, k=k, mode=mode) -> None:
            comm.progress(k * steps + step + 1, total, f"{mode.name} step {step + 1}/{steps}")

        record, dp = train_mode(comm, mode, setup, sampler, steps, tick, checkpoints)
        modes.append(record)
    out = {"ok": True, "modes": modes, "checkpoints": checkpoints.close()}
    assert dp is not None  # the last mode's (Params has at least one)
    weights = dp.gradients.full_params()  # every rank: ZeRO-3's is an all-gather of the shards
    if comm.rank == 0:
        if comm.run_dir is not None:
            save_model(comm.run_dir / "model.npz", setup.config, weights)
        model = Transformer(setup.config, weights)
        tokens = generate(
            model, params.prompt, params.sample_bytes, temperature=params.temperature, seed=params.seed
        )
        sample = bytes(tokens.astype("uint8"))
        out["sample"] = decode_sample(sample)
        out["sample_likeness"] = asdict(lecture_likeness(sample, bytes(lecture_bytes())))
    return out


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    ddp = ddp_baseline.run(params, len(results), run_dir) if params.baseline == "ddp" else None
    fsdp = fsdp_baseline.run(params, len(results), run_dir) if params.baseline == "fsdp" else None
    return with_checkpoints(
        training_report.report(results, params, run_dir, ddp, fsdp=fsdp), results, params.checkpoint_every
    )


CONTRACT = NodeContract(
    Params,
    summarize,
    check_scenario=check_scenario,
    threaded=True,  # a communication thread beside the compute
    checkpoint_identity=checkpoint_identity,
    live_recovery=live_recovery,
)
