"""GPT-2's initialisation, identical on every rank: the flat parameter buffer from a seed.

Weights (embeddings and linear layers) are N(0, 0.02); the two residual projections of each block
(`attn.c_proj`, `mlp.c_proj`) are N(0, 0.02 / sqrt(2 L)), so that the residual stream's variance
does not grow with depth (GPT-2 paper, section 2.3; nanoGPT's `_init_weights`); biases are 0 and
layernorm weights 1. The draws come from `np.random.default_rng(seed)` in layout order, always
in float64 and then rounded to the dtype, so a float32 and a float64 model start from the same
values (to float32 rounding) and every rank that uses the same seed starts bit-identical.
"""

import math

import numpy as np

from playground.transformer.config import ModelConfig
from playground.transformer.layout import ParamLayout

INIT_STD = 0.02
LAYERNORM_WEIGHTS = ("ln_1.weight", "ln_2.weight", "ln_f.weight")
RESIDUAL_PROJECTIONS = ("attn.c_proj.weight", "mlp.c_proj.weight")


def init_std(name: str, layers: int) -> float | None:
    """The standard deviation parameter `name` is drawn with, or None if it is a constant."""
    if name.endswith(".bias") or name.endswith(LAYERNORM_WEIGHTS):
        return None
    if name.endswith(RESIDUAL_PROJECTIONS):
        return INIT_STD / math.sqrt(2 * layers)
    return INIT_STD


def init_params(
    config: ModelConfig, seed: int, named: list[tuple[str, tuple[int, ...]]] | None = None
) -> np.ndarray:
    """A new flat parameter buffer (`config.dtype`, `config.num_params` elements); of the parameters
    `named` ((name, shape) in layout order, as a mixture of experts has them) if given."""
    layout = ParamLayout.for_config(config) if named is None else ParamLayout.of_named(named)
    flat = np.zeros(layout.num_elements, dtype=config.np_dtype)
    rng = np.random.default_rng(seed)
    for spec, view in zip(layout, layout.views(flat).values(), strict=True):
        std = init_std(spec.name, config.layers)
        if std is not None:
            view[...] = rng.standard_normal(spec.shape) * std
        elif spec.name.endswith(LAYERNORM_WEIGHTS):
            view[...] = 1
    return flat
