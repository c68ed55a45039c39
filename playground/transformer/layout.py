"""Where each parameter lives in the flat buffer: the layout as data.

All parameters are views into ONE contiguous array, and the gradients into a second array with
the same layout, because data parallelism works on byte ranges, not on tensors: a DDP bucket is
a contiguous slice of the gradient buffer (all-reduced in place, no packing copy), and a ZeRO-1
shard is a slice of the parameters, gradients and optimizer states (Adam on that slice only).

The order is the forward order, with GPT-2's names (as nanoGPT's `transformer.*` without the
prefix) and shapes (in, out) for the linear layers (GPT-2's Conv1D; torch's nn.Linear holds the
transpose):

    wte (V, d)  wpe (T, d)
    per block l: h.l.ln_1.weight (d,) .bias (d,)  h.l.attn.c_attn.weight (d, 3d) .bias (3d,)
                 h.l.attn.c_proj.weight (d, d) .bias (d,)  h.l.ln_2.weight (d,) .bias (d,)
                 h.l.mlp.c_fc.weight (d, 4d) .bias (4d,)  h.l.mlp.c_proj.weight (4d, d) .bias (d,)
    ln_f.weight (d,)  ln_f.bias (d,)

The output layer is tied to `wte` (logits = x @ wte.T), so it has no entry of its own. Backward
finishes the gradients in exactly the reverse of this order (ln_f.bias first, wte last), so
"the tensors ready so far" is always a suffix of the buffer, and a bucket of consecutive tensors
in backward order is one contiguous slice.
"""

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from playground.core.errors import UsageError
from playground.transformer.config import ModelConfig

BLOCK_PARAMS: tuple[
    tuple[str, Callable[[int], tuple[int, ...]]], ...
] = (  # suffix, shape of d, in forward order
    ("ln_1.weight", lambda d: (d,)),
    ("ln_1.bias", lambda d: (d,)),
    ("attn.c_attn.weight", lambda d: (d, 3 * d)),
    ("attn.c_attn.bias", lambda d: (3 * d,)),
    ("attn.c_proj.weight", lambda d: (d, d)),
    ("attn.c_proj.bias", lambda d: (d,)),
    ("ln_2.weight", lambda d: (d,)),
    ("ln_2.bias", lambda d: (d,)),
    ("mlp.c_fc.weight", lambda d: (d, 4 * d)),
    ("mlp.c_fc.bias", lambda d: (4 * d,)),
    ("mlp.c_proj.weight", lambda d: (4 * d, d)),
    ("mlp.c_proj.bias", lambda d: (d,)),
)


def param_shapes(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter's (name, shape), in forward order."""
    d = config.d_model
    named: list[tuple[str, tuple[int, ...]]] = [("wte", (config.vocab_size, d)), ("wpe", (config.context, d))]
    for layer in range(config.layers):
        named += [(f"h.{layer}.{suffix}", shape(d)) for suffix, shape in BLOCK_PARAMS]
    return [*named, ("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


@dataclass(frozen=True)
class ParamSpec:
    """Parameter `index` (forward order) is `name`, `shape`, at elements [offset, offset + size)."""

    index: int
    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # not np.prod: a view per parameter per gather asks for it

    @property
    def stop(self) -> int:
        return self.offset + self.size

    def byte_range(self, itemsize: int) -> tuple[int, int]:
        return self.offset * itemsize, self.stop * itemsize


class ParamLayout:
    """The specs in forward order; `layout[i]`, `layout["wte"]`, `len(layout)`, iteration."""

    def __init__(self, specs: tuple[ParamSpec, ...]):
        self.specs = specs
        self._by_name = {s.name: s for s in specs}
        self.num_elements = specs[-1].stop if specs else 0

    @classmethod
    def for_config(cls, config: ModelConfig) -> "ParamLayout":
        return cls.of_named(param_shapes(config))

    @classmethod
    def of_named(cls, named: list[tuple[str, tuple[int, ...]]]) -> "ParamLayout":
        """(name, shape) pairs laid out one after another in the given order (a pipeline stage's
        parameters are a subset of the model's, in the same order: `plan.StagePlan.layout`)."""
        specs, offset = [], 0
        for index, (name, shape) in enumerate(named):
            specs.append(ParamSpec(index, name, offset, shape))
            offset += specs[-1].size
        return cls(tuple(specs))

    def __len__(self) -> int:
        return len(self.specs)

    def __iter__(self) -> Iterator[ParamSpec]:
        return iter(self.specs)

    def __getitem__(self, key: int | str) -> ParamSpec:
        if isinstance(key, str):
            if key not in self._by_name:
                raise UsageError(f"no parameter {key!r}", field="name")
            return self._by_name[key]
        return self.specs[key]

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """name -> a view of `flat` (no copy) with the parameter's shape."""
        if flat.ndim != 1 or flat.size != self.num_elements or not flat.flags.c_contiguous:
            raise UsageError(
                f"needs a contiguous 1-d array of {self.num_elements} elements, got shape {flat.shape}",
                field="flat",
            )
        return {s.name: flat[s.offset : s.stop].reshape(s.shape) for s in self.specs}

    def to_json(self) -> list[list]:
        """[[name, offset, shape], ...] as stored in model.npz."""
        return [[s.name, s.offset, list(s.shape)] for s in self.specs]
