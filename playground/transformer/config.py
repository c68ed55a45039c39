"""The model's sizes: one frozen, validated dataclass that every other module of the package reads.

A GPT-2 shaped, byte-level model: `vocab_size` symbols (256: one per byte value), `layers` blocks
of width `d_model` with `heads` attention heads, learned positions for `context` tokens. `dtype`
is the dtype of the parameters, gradients, activations and optimizer states alike (float64 for
the exactness checks, float32 to train and serve).
"""

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from playground.core.errors import ParamError

DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    context: int = 64
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("vocab_size", "layers", "d_model", "heads", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ParamError(name, f"must be an integer >= 1, got {value!r}")
        if self.d_model % self.heads:
            raise ParamError(
                "heads", f"must divide d_model={self.d_model} (head_dim = d_model / heads), got {self.heads}"
            )
        if self.dtype not in DTYPES:
            raise ParamError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def num_params(self) -> int:
        """V*d + T*d (embeddings) + L*(12 d^2 + 13 d) (blocks) + 2 d (final layernorm)."""
        d = self.d_model
        return (self.vocab_size + self.context) * d + self.layers * (12 * d * d + 13 * d) + 2 * d

    @property
    def param_bytes(self) -> int:
        return self.num_params * self.np_dtype.itemsize

    @property
    def kv_width(self) -> int:
        """Elements of KV cache per token: K and V of every layer, `layers * 2 * heads * head_dim`."""
        return self.layers * 2 * self.heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv_width * self.np_dtype.itemsize

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """A config from a mapping (a model file's, a scenario's): unknown keys are errors."""
        allowed = [f.name for f in fields(cls)]
        for key in d:
            if key not in allowed:
                raise ParamError(key, f"unknown model key; allowed: {', '.join(allowed)}")
        return cls(**d)
