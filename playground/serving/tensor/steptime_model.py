"""A tensor-parallel decode step's predicted time, the alpha-beta way:

    step(t) = rest + L x (layer / t + 2 x allreduce(batch x d x 4 bytes, t))

`layer` is one block's compute of the step on one process and `rest` everything else of the step
(embedding, the head's logits, scheduling, the engine's bookkeeping), both measured: the one-process
decode step of the model with L layers and with 1 layer, the slope and the intercept
(`layer_costs`). The all-reduces are `collectives.tensor_allreduce.allreduce_time_s` on the run's
link: two per block (after the attention's and the MLP's row-parallel product), of the step's
activation, one row of d float32 per sequence.

It assumes that a shard computes its 1/t of a block in 1/t of the time and that `rest` does not
shrink. The first fails as shards get small (a numpy call costs microseconds whatever its size);
the simulation (`simulate`), which measures each shard's compute, shows by how much.
"""

from playground.collectives.tensor_allreduce import allreduce_time_s
from playground.core.errors import UsageError
from playground.models.costs import Link
from playground.transformer import ModelConfig

KV_ITEMSIZE = 4  # the served model is float32


def layer_costs(one_layer_s: float, all_layers_s: float, layers: int) -> tuple[float, float]:
    """(one block's compute, the rest) from the decode step of a 1-layer and an L-layer model."""
    if layers < 2:
        raise UsageError(f"the slope needs a model of 2 or more layers, got {layers}", field="layers")
    layer = max(0.0, (all_layers_s - one_layer_s) / (layers - 1))
    return layer, max(0.0, all_layers_s - layers * layer)


def predict_decode_s(
    config: ModelConfig,
    layer_s: float,
    rest_s: float,
    batch: int,
    t: int,
    link: Link,
    algorithm: str = "auto",
) -> dict:
    """{"compute_s", "allreduce_s", "step_s"} of a decode step of `batch` sequences on t shards."""
    allreduces = (
        2 * config.layers * allreduce_time_s(batch * config.d_model * KV_ITEMSIZE, t, link, algorithm)
    )
    compute = rest_s + config.layers * layer_s / t
    return {"compute_s": compute, "allreduce_s": allreduces, "step_s": compute + allreduces}
