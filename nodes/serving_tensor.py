"""Tensor-parallel serving: the KV-cache engine on t ranks, each running the model's shard of heads
and MLP units with its own heads' KV in its own paged pool; decode step time against t, measured,
modelled and simulated, for a small and a large model; every run's tokens equal to one process's.

For each model shape and each t (every t up to the ranks that divides the heads), ranks 0..t-1 form
a tensor group (`playground.comm.group.new_group`; the others wait) and each runs
`playground.serving.tensor.decode.decode_batch`: its shard of the model (`tensor_plan`), an engine
over a pool of its heads (`kvcache/engine/tensor_parallel.py`), the same requests; every rank runs
the same deterministic scheduler, so they agree on every step without a message. The runs of all t
alternate, `rounds` times, and rank 0 also runs the model with one layer (the step-time model's
calibration: the slope over layers is a block's compute). `summarize` checks every rank's tokens
against the one-process run's, puts each t's decode step beside the alpha-beta model (compute / t +
two all-reduces per block) and beside the same code simulated on t ranks (`simulate`: up to 64 by
default, communication in virtual time, each shard's compute measured), and draws them.
"""

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from playground.collectives import registry
from playground.comm.group import Group, new_group
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.display.report import Report
from playground.kvcache.engine.attention import Kernel
from playground.models.calibration import LinkSpec
from playground.serving import resume
from playground.serving.tensor import tensor_report
from playground.serving.tensor.decode import DecodeBatch, decode_batch
from playground.transformer import ModelConfig, pin_blas_threads
from playground.transformer.init import init_params
from playground.transformer.tensor_plan import check_tensor

Shape = Literal["small", "large"]
SHAPES: dict[
    Shape, dict[str, int]
] = {  # the serving lab's default model, and serving-batch's (and train-large's) 25M-parameter one
    "small": {"layers": 2, "d_model": 64, "heads": 4},
    "large": {"layers": 8, "d_model": 512, "heads": 8},
}
Algorithm = registry.AllreduceChoice


@dataclass(frozen=True)
class Params:
    shapes: tuple[Shape, ...] = ("small", "large")  # model shapes, each with fixed random weights
    context: int = 64  # positions of both shapes
    seed: int = 0  # the weights
    tensor: tuple[int, ...] | None = (
        None  # t of each run, each <= ranks and dividing the heads; null: every such t
    )
    rounds: int = 3  # every t's run, alternated (decode steps pooled over the rounds)
    batch: int = 8  # sequences decoded together
    prompt_tokens: int = 16  # each request's prompt (bytes of the lecture)
    new_tokens: int = 16  # each request's output: one prefill step, then new_tokens - 1 decode steps
    temperature: float = 1.0  # request b samples with seed b: the tokens depend on every logit (0: greedy)
    block_size: int = 16  # the paged pool's block, in tokens
    kernel: Kernel = "native"  # decode attention: native (C) or numpy
    algorithm: Algorithm = "auto"  # the tensor all-reduce
    simulate: tuple[int, ...] = (
        1,
        2,
        4,
        8,
        16,
        32,
        64,
    )  # t simulated (each must divide d_model); [] for none
    # the model's link: a preset or a calibration.json of `calibrate`; null: this machine's
    # calibration (./calibration.json), else a labelled default
    model: LinkSpec | None = None

    def __post_init__(self):
        if not self.shapes or len(set(self.shapes)) != len(self.shapes):
            raise ParamError("shapes", f"a non-empty list of {', '.join(SHAPES)} without repeats")
        if self.rounds < 1:
            raise ParamError("rounds", f"must be >= 1, got {self.rounds}")
        if self.tensor is not None and (not self.tensor or len(set(self.tensor)) != len(self.tensor)):
            raise ParamError("tensor", f"a non-empty list of distinct t, or null, got {list(self.tensor)}")
        workload = self.workload
        for shape in self.shapes:
            config = self.config(shape)
            workload.check(config)
            for t in self.tensor or ():
                check_tensor(config, t, "tensor")
            if any(t < 1 or config.d_model % t for t in self.simulate):  # then their lcm divides d too
                raise ParamError(
                    "simulate",
                    f"each t must divide d_model = {config.d_model} of the {shape} model (beyond its "
                    f"{config.heads} heads the simulation cuts d_model into more heads), got {list(self.simulate)}",
                )

    def config(self, shape: Shape) -> ModelConfig:
        return ModelConfig(**SHAPES[shape], context=self.context, dtype="float32")

    @property
    def workload(self) -> DecodeBatch:
        return DecodeBatch(
            self.batch, self.prompt_tokens, self.new_tokens, self.temperature, self.block_size, self.kernel
        )

    def sizes(self, shape: Shape, ranks: int) -> tuple[int, ...]:
        """The t run for `shape`: 1 (one process: the reference) and `tensor`, or every t up to the
        ranks dividing its heads."""
        if self.tensor is not None:
            return tuple(dict.fromkeys((1, *self.tensor)))
        heads = self.config(shape).heads
        return tuple(t for t in range(1, ranks + 1) if heads % t == 0)


def check_scenario(params: Params, ranks: int) -> None:
    big = [t for t in params.tensor or () if t > ranks]
    if big:
        raise ParamError(
            "params.tensor",
            f"a tensor group of t = {max(big)} ranks is larger than the run's {ranks} ranks "
            f"(run with --ranks {max(big)}, or simulate it: params.simulate)",
        )


def main(comm, params: Params) -> dict:
    """Each (shape, round) once: a run restarted after a failure (a shard killed) takes the rounds
    every rank finished from the run directory and runs the others (serving/resume.py)."""
    pin_blas_threads(1)  # the ranks share the cores: one BLAS thread each
    (done, redone), shapes = resume.rounds_done(comm), []
    groups: dict[int, Group | None] = {}  # one group a t, made when first needed (15 a process at most)
    for k, shape in enumerate(params.shapes):
        runs, calibration = [], []
        for r in range(params.rounds):
            comm.progress(k * params.rounds + r, len(params.shapes) * params.rounds, f"{shape} round {r + 1}")
            i = k * params.rounds + r
            if i < len(done):
                record = done[i]
            else:
                resume.round_started(comm, i)
                record = _round(comm, params, shape, r, groups)
                resume.round_done(comm, record)
            runs += record["runs"]
            calibration += record["calibration"]
        shapes.append({"shape": shape, "runs": runs, "calibration": calibration})
    return {"ok": True, "shapes": shapes, "resumed_rounds": len(done), "redone_rounds": redone}


@functools.cache
def _weights(config: ModelConfig, seed: int) -> np.ndarray:
    return init_params(config, seed)


def _round(comm, params: Params, shape: Shape, r: int, groups: dict[int, Group | None]) -> dict:
    """One round of `shape`: the decode batch on every t (alternating their order), and on rank 0
    through one layer (the model's calibration). `groups`: each t's group, kept across rounds (every
    rank makes them in the same order, as new_group asks)."""
    config, sizes, workload = params.config(shape), params.sizes(shape, comm.size), params.workload
    whole = _weights(config, params.seed)
    runs, calibration = [], []
    for t in sizes if r % 2 == 0 else reversed(sizes):
        if t not in groups:
            groups[t] = new_group(comm, list(range(t)), f"tensor{t}")
        group = groups[t]
        if group is not None:
            run = decode_batch(
                group, config, workload, whole=whole, seed=params.seed, algorithm=params.algorithm,
                clock=time.perf_counter,
            )  # fmt: skip
            runs.append({"t": t, "round": r, **run})
        comm.barrier()
    if comm.rank == 0:  # the model's calibration: the same batch through one layer
        one = dataclasses.replace(config, layers=1)
        run = decode_batch(None, one, workload, whole=init_params(one, params.seed), clock=time.perf_counter)
        calibration.append(run["steps"])
    comm.barrier()
    return {"shape": shape, "round": r, "runs": runs, "calibration": calibration}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return tensor_report.report(results, params, run_dir)


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
