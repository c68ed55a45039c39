"""One shard's run of a decode batch: the model's shard, its engine, the batch's requests stepped to
the end; the same function on every rank of a tensor group, launched or simulated.

The workload (`DecodeBatch`) is `batch` requests of `prompt_tokens` bytes of the lecture each,
`new_tokens` each, all added at once: one prefill step, then `new_tokens - 1` decode steps of the
whole batch, the shape of a serving engine's steady state. Each step's time is the engine's own
(`LLMEngine.step_log`: scheduling and the model's step, by the clock it is given) and so is the time
its tensor all-reduces took (`TensorAllReduce.seconds` before and after).
"""

from dataclasses import dataclass

import numpy as np

from playground.collectives.tensor_allreduce import TensorAllReduce
from playground.core.errors import ParamError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.llm_engine import STEP_LOG_COLUMNS
from playground.kvcache.engine.sequence import SamplingParams
from playground.kvcache.engine.tensor_parallel import shard_engine
from playground.kvcache.workloads import text_prompt
from playground.transformer import ModelConfig, Transformer
from playground.transformer.plan import StagePlan
from playground.transformer.tensor_plan import TensorPlan

PROMPT_KEY = 30_000  # where in the lecture's text the prompts come from (text_prompt's key + b)


@dataclass(frozen=True)
class DecodeBatch:
    batch: int = 8
    prompt_tokens: int = 16
    new_tokens: int = 16
    temperature: float = 1.0  # request b samples with seed b (0: greedy)
    block_size: int = 16
    kernel: str = "native"

    def __post_init__(self):
        for key in ("batch", "prompt_tokens", "new_tokens", "block_size"):
            if getattr(self, key) < 1:
                raise ParamError(key, f"must be >= 1, got {getattr(self, key)}")
        if not self.temperature >= 0:
            raise ParamError("temperature", f"must be >= 0, got {self.temperature}")

    @property
    def capacity_tokens(self) -> int:
        """Room for every sequence's prompt and output, in whole blocks."""
        per_seq = -(-(self.prompt_tokens + self.new_tokens) // self.block_size) * self.block_size
        return self.batch * per_seq

    def check(self, config: ModelConfig) -> None:
        if self.prompt_tokens + self.new_tokens > config.context:
            raise ParamError(
                "new_tokens",
                f"prompt_tokens + new_tokens = {self.prompt_tokens + self.new_tokens} must fit the "
                f"context of {config.context} (a decode step past it is a prefill)",
            )

    def prompts(self) -> list[list[int]]:
        return [text_prompt(PROMPT_KEY + b, self.prompt_tokens) for b in range(self.batch)]


def shard_model(config: ModelConfig, group, all_reduce, whole: np.ndarray | None, seed: int) -> Transformer:
    """This rank's shard (of `group`, None or one rank: the whole model) of the model whose
    parameters are `whole` (None: GPT-2's initialisation from `seed`)."""
    t, rank = (1, 0) if group is None else (group.size, group.rank)
    plan = StagePlan.whole(config, TensorPlan(rank, t))
    params = None if whole is None else plan.take(config, whole).copy()
    return Transformer(config, params, seed=seed, plan=plan, all_reduce=all_reduce if t > 1 else None)


def decode_batch(
    group,
    config: ModelConfig,
    workload: DecodeBatch,
    *,
    whole: np.ndarray | None = None,
    seed: int = 0,
    algorithm: str = "auto",
    clock,
    comm_clock=None,
    wrap=None,
) -> dict:
    """This shard's run (see the module doc): {"tokens": each request's, "steps": [{"decodes",
    "prefill", "step_s", "allreduce_s"}]}, steps timed by `clock`, all-reduces by `comm_clock`
    (default `clock`). `wrap(all_reduce)` may wrap the tensor all-reduce (the simulator charges
    compute around it)."""
    all_reduce = None
    if group is not None and group.size > 1:
        all_reduce = TensorAllReduce(group, algorithm, comm_clock or clock)
    hook = all_reduce if wrap is None or all_reduce is None else wrap(all_reduce)
    model = shard_model(config, group, hook, whole, seed)
    engine = shard_engine(
        model,
        workload.capacity_tokens,
        workload.block_size,
        config=EngineConfig(kernel=workload.kernel),
        clock=clock,
    )
    requests = [
        engine.add_request(
            b"", b, prompt, SamplingParams(workload.new_tokens, temperature=workload.temperature, seed=b)
        )
        for b, prompt in enumerate(workload.prompts())
    ]
    steps = []
    while engine.has_work():
        before = 0.0 if all_reduce is None else all_reduce.seconds
        engine.step()
        row = dict(zip(STEP_LOG_COLUMNS, engine.step_log[-1], strict=True))
        decodes, prefill, step_s = row["decodes"], row["prefill_tokens"], row["step_s"]
        after = 0.0 if all_reduce is None else all_reduce.seconds
        steps.append(
            {"decodes": decodes, "prefill": prefill, "step_s": step_s, "allreduce_s": after - before}
        )
    return {"tokens": [r.seqs[0].token_ids[len(r.prompt) :] for r in requests], "steps": steps}


def decode_times(steps: list[dict]) -> list[float]:
    """The step times of the decode steps (no prefill tokens)."""
    return [s["step_s"] for s in steps if s["prefill"] == 0]
