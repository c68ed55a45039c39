"""Which part of the transformer a rank holds and runs: the plan that model parallelism applies to
the one model definition, as torchtitan applies its parallelisms to an unchanged model.

A `StagePlan` says, for one rank, which contiguous blocks it runs (`first_layer` up to
`stop_layer`), whether it holds the embeddings (`embedding`: the first pipeline stage, tokens in)
and the head (`head`: the last stage, the final layernorm, the output layer and the loss). The
`Transformer` built with a plan holds only those parameters (`layout`), named as in the whole model
and in its order (block 3 is `h.3.*` on whichever stage holds it), so a stage's buffers map onto
the whole model's by name, and its `forward_stage` / `backward_stage` run that range: an input
activation in (or the tokens), an output activation out (or the loss); the output's gradient in,
the input's gradient out. `StagePlan.whole(config)` is one process's plan: every block, both ends.

The output layer is tied to `wte`: with several stages both the first (embedding) and the last
(head) hold a copy of it. Each computes its part of wte's gradient; the pipeline sums the two after
backward (Megatron-LM's embedding group) so that both copies take the same update and stay
bit-identical.

`pipeline_plan(config, p)` splits the blocks evenly over p stages. The split must be even (p
divides `layers`): the pipeline's bubble formula assumes equal stages, and an uneven split only
makes the slowest stage everyone's bottleneck.

Tensor parallelism composes with it: `tensor` (`tensor_plan.TensorPlan`) says which shard of each
split matrix this rank holds (Megatron's split: c_attn and c_fc by columns, the two c_proj by rows,
each completed by an all-reduce over `grid.tensor`). `param_shapes` gives each parameter its
shard's shape, `take` cuts a whole model's parameters to what this rank holds, and the model reads
its parameters through `layout`, never assuming the whole model's shapes.

A mixture of experts is a plan too: `experts` (`moe.ExpertPlan`) turns every block's MLP into a router
and E experts, of which this rank holds its expert group's share (`moe/config.py` names them and
lays them out); it composes with data parallelism, not yet with pipeline stages or tensor shards.

Activation memory: `activation_bytes` counts what a stage's backward keeps from one micro-batch's
forward (`model.Activations.nbytes` is the same count, of the arrays themselves), per token:
    each block: 4 d + 2 + (16 d + H T) / t elements (replicated: the layernorms' normalised inputs
                and 1/std, their outputs; a shard's: q, k, v, the attention probabilities (H/t x T
                per token), its output, the MLP's three 4 d / t arrays); t = 1: 20 d + 2 + H T
    head:       2 d + 1 + V elements (ln_f's input and output, 1/std, the softmax) + the target
    embedding:  the token (int64)
"""

from dataclasses import dataclass, field

import numpy as np

from playground.core.errors import ParamError
from playground.transformer.config import ModelConfig
from playground.transformer.init import init_params
from playground.transformer.layout import ParamLayout, param_shapes
from playground.transformer.moe.config import ExpertPlan
from playground.transformer.tensor_plan import TensorPlan

INDEX_BYTES = 8  # tokens and targets are int64


@dataclass(frozen=True)
class StagePlan:
    """Blocks [first_layer, stop_layer) of `stage` of `num_stages`; the first stage holds the
    embeddings, the last the head; `tensor`: the shard of each split matrix it holds."""

    first_layer: int
    stop_layer: int
    stage: int = 0
    num_stages: int = 1
    tensor: TensorPlan = field(default_factory=TensorPlan)
    experts: ExpertPlan | None = None

    def __post_init__(self):
        if self.experts is not None and (self.num_stages > 1 or self.tensor.is_split):
            raise ParamError(
                "experts", "experts combine with data parallelism, not yet with stages or shards"
            )
        if not 0 <= self.stage < self.num_stages:
            raise ParamError("stage", f"must be in 0..{self.num_stages - 1}, got {self.stage}")
        if not 0 <= self.first_layer <= self.stop_layer:
            raise ParamError("first_layer", f"blocks [{self.first_layer}, {self.stop_layer}) are not a range")

    @classmethod
    def whole(
        cls, config: ModelConfig, tensor: TensorPlan | None = None, experts: ExpertPlan | None = None
    ) -> "StagePlan":
        """Every block and both ends (of shard `tensor` of each split matrix, if given; with
        `experts`, every block's router and this rank's experts in place of its MLP)."""
        return cls(0, config.layers, tensor=tensor or TensorPlan(), experts=experts)

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.stop_layer)

    @property
    def embedding(self) -> bool:
        return self.stage == 0

    @property
    def head(self) -> bool:
        return self.stage == self.num_stages - 1

    @property
    def is_whole(self) -> bool:
        """One stage: every block and both ends (each matrix whole, or a shard of it)."""
        return self.num_stages == 1

    @property
    def holds_everything(self) -> bool:
        """One process's plan: every parameter, whole."""
        return self.is_whole and not self.tensor.is_split and not (self.experts and self.experts.is_split)

    @property
    def holds_wte(self) -> bool:
        return self.embedding or self.head

    @property
    def tied_partner(self) -> int | None:
        """The other stage holding a copy of wte (None with one stage)."""
        if self.num_stages == 1 or not self.holds_wte:
            return None
        return self.num_stages - 1 if self.embedding else 0

    def param_shapes(self, config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
        """This rank's parameters, (name, shape) in the whole model's order."""
        blocks = {f"h.{layer}." for layer in self.layers}
        keep = []
        for name, shape in self.model_shapes(config):
            if name == "wte":
                held = self.holds_wte
            elif name == "wpe":
                held = self.embedding
            elif name.startswith("ln_f."):
                held = self.head
            else:
                held = name[: name.index(".", 2) + 1] in blocks
            if held:
                if self.experts is not None:
                    shape = self.experts.shard_shape(name, shape)
                keep.append((name, self.tensor.shard_shape(name, shape)))
        return keep

    def model_shapes(self, config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
        """The whole model's parameters (name, shape) in layout order: the dense model's, or with
        `experts` the mixture of experts' (every expert of every block)."""
        dense = param_shapes(config)
        return dense if self.experts is None else self.experts.model_shapes(dense)

    def initial_params(self, config: ModelConfig, seed: int) -> np.ndarray:
        """What this rank holds of the whole model's initialisation from `seed` (`take`)."""
        return self.take(config, init_params(config, seed, self.model_shapes(config)))

    def layout(self, config: ModelConfig) -> ParamLayout:
        return ParamLayout.of_named(self.param_shapes(config))

    def take(self, config: ModelConfig, whole: np.ndarray) -> np.ndarray:
        """What this rank holds of the whole model's flat parameters `whole` (picked by name, each
        split matrix cut to its shard, each block's experts to this rank's), as a new flat buffer;
        `whole` itself if it holds everything."""
        if self.holds_everything:
            return whole
        views = ParamLayout.of_named(self.model_shapes(config)).views(whole)
        names = [name for name, _ in self.param_shapes(config)]
        experts = self.experts
        return np.concatenate(
            [
                self.tensor.shard(
                    name, views[name] if experts is None else experts.shard(name, views[name])
                ).ravel()
                for name in names
            ]
        )

    def activation_bytes(self, config: ModelConfig, rows: int, seq_len: int) -> int:
        """Bytes the backward of this stage keeps from the forward of `rows` sequences of `seq_len`
        tokens (the module doc's count)."""
        d, itemsize, t = config.d_model, config.np_dtype.itemsize, self.tensor.size
        sharded = (16 * d + config.heads * seq_len) // t
        per_token = len(self.layers) * (4 * d + 2 + sharded) * itemsize
        if self.head:
            per_token += (2 * d + 1 + config.vocab_size) * itemsize + INDEX_BYTES
        if self.embedding:
            per_token += INDEX_BYTES
        return rows * seq_len * per_token

    def describe(self) -> str:
        ends = [e for e, held in (("embeddings", self.embedding), ("head", self.head)) if held]
        blocks = f"blocks {self.first_layer}-{self.stop_layer - 1}" if self.layers else "no blocks"
        shard = f", {self.tensor.describe()}" if self.tensor.is_split else ""
        shard += f", {self.experts.describe()}" if self.experts is not None else ""
        return f"stage {self.stage}: {blocks}" + (f" + {' + '.join(ends)}" if ends else "") + shard


def pipeline_plan(
    config: ModelConfig, num_stages: int, key: str = "pipeline", tensor: TensorPlan | None = None
) -> tuple[StagePlan, ...]:
    """Every stage's plan: `layers / num_stages` consecutive blocks each (each holding shard
    `tensor` of its split matrices). ParamError (naming `key`) if num_stages does not divide the
    layers."""
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ParamError(key, f"must be an integer >= 1, got {num_stages!r}")
    if config.layers % num_stages:
        raise ParamError(
            key,
            f"{num_stages} stages must divide the model's {config.layers} layers (equal stages), "
            f"e.g. {', '.join(str(p) for p in range(1, config.layers + 1) if config.layers % p == 0)}",
        )
    per = config.layers // num_stages
    tensor = tensor or TensorPlan()
    return tuple(StagePlan(s * per, (s + 1) * per, s, num_stages, tensor) for s in range(num_stages))
