"""The one-process training loop: what every data-parallel mode must equal.

Step s: the global batch of step s, forward, backward, Adam over the whole flat buffer at the
schedule's rate of step s (the configured rate without one). A
data-parallel rank does the same on its rows with `loss_denominator` = the global batch's token
count, and its gradients summed over ranks are this loop's gradients (to rounding).
"""

from collections.abc import Callable

from playground.transformer.config import ModelConfig
from playground.transformer.data import BatchSampler
from playground.transformer.model import Transformer
from playground.transformer.optim import Adam, AdamConfig, LRSchedule


def train_one_process(
    config: ModelConfig,
    sampler: BatchSampler,
    steps: int,
    *,
    adam: AdamConfig | None = None,
    seed: int = 0,
    schedule: LRSchedule | None = None,
    on_step: Callable[[int, float, Transformer], None] | None = None,
) -> tuple[Transformer, list[float]]:
    """A model initialised from `seed`, trained for `steps` steps; returns it and the loss of
    every step (before that step's update). `on_step(step, loss, model)` runs after each update."""
    model = Transformer(config, seed=seed)
    optimizer = Adam(model.params.size, config.np_dtype, adam or AdamConfig())
    losses = []
    for step in range(steps):
        inputs, targets = sampler.rank_batch(step)
        losses.append(model.forward(inputs, targets))
        model.backward()
        optimizer.step(model.params, model.grads, schedule.lr_at(step) if schedule else None)
        if on_step:
            on_step(step, losses[-1], model)
    return model, losses
