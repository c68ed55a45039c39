"""Gradient tensors of real models, computed from their layer definitions, in backward order.

Why computed, not copied from a table: the sizes then follow from shapes a reader can check
(ResNet-50 has 25,557,032 parameters in 161 tensors, GPT-2 small 124,439,808 in 148 with the
LM head tied to the token embedding), and a new architecture is a few lines.

Order: a module's parameters are listed in registration order (as `model.parameters()` gives
them); backward produces gradients roughly in the reverse order, last layer first, which is
also the order PyTorch DDP assumes when it first builds its buckets. `backward_order` returns
that reversed list. Batch-norm running statistics are buffers, not parameters: no gradients.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError


@dataclass(frozen=True)
class TensorSpec:
    """One parameter (hence one gradient) tensor: its dotted name and shape."""

    name: str
    shape: tuple[int, ...]

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    def num_bytes(self, itemsize: int = 4) -> int:
        return self.num_elements * itemsize


def _conv_bn(prefix: str, conv: str, bn: str, c_in: int, c_out: int, k: int) -> list[TensorSpec]:
    # torchvision's convolutions in ResNet have bias=False; the batch norm has weight and bias.
    return [
        TensorSpec(f"{prefix}{conv}.weight", (c_out, c_in, k, k)),
        TensorSpec(f"{prefix}{bn}.weight", (c_out,)),
        TensorSpec(f"{prefix}{bn}.bias", (c_out,)),
    ]


def resnet50_parameters(num_classes: int = 1000) -> list[TensorSpec]:
    """torchvision.models.resnet50 parameters in registration (forward) order."""
    params = _conv_bn("", "conv1", "bn1", 3, 64, 7)
    expansion = 4
    in_ch = 64
    for layer, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True), start=1):
        for b in range(blocks):
            p = f"layer{layer}.{b}."
            params += _conv_bn(p, "conv1", "bn1", in_ch, planes, 1)
            params += _conv_bn(p, "conv2", "bn2", planes, planes, 3)
            params += _conv_bn(p, "conv3", "bn3", planes, planes * expansion, 1)
            if b == 0:  # the first block changes width (and stride): a 1x1 projection shortcut
                params += _conv_bn(p, "downsample.0", "downsample.1", in_ch, planes * expansion, 1)
            in_ch = planes * expansion
    params += [TensorSpec("fc.weight", (num_classes, in_ch)), TensorSpec("fc.bias", (num_classes,))]
    return params


def gpt2_small_parameters(
    vocab: int = 50257, context: int = 1024, width: int = 768, num_layers: int = 12
) -> list[TensorSpec]:
    """Hugging Face GPT2LMHeadModel ("gpt2", 124M) parameters in registration order.

    The LM head shares its weight with `wte`, so it adds no tensor: one gradient, accumulated
    from both uses. HF's Conv1D stores weights as (in, out).
    """
    params = [
        TensorSpec("transformer.wte.weight", (vocab, width)),
        TensorSpec("transformer.wpe.weight", (context, width)),
    ]
    for i in range(num_layers):
        p = f"transformer.h.{i}."
        params += [
            TensorSpec(p + "ln_1.weight", (width,)),
            TensorSpec(p + "ln_1.bias", (width,)),
            TensorSpec(p + "attn.c_attn.weight", (width, 3 * width)),
            TensorSpec(p + "attn.c_attn.bias", (3 * width,)),
            TensorSpec(p + "attn.c_proj.weight", (width, width)),
            TensorSpec(p + "attn.c_proj.bias", (width,)),
            TensorSpec(p + "ln_2.weight", (width,)),
            TensorSpec(p + "ln_2.bias", (width,)),
            TensorSpec(p + "mlp.c_fc.weight", (width, 4 * width)),
            TensorSpec(p + "mlp.c_fc.bias", (4 * width,)),
            TensorSpec(p + "mlp.c_proj.weight", (4 * width, width)),
            TensorSpec(p + "mlp.c_proj.bias", (width,)),
        ]
    params += [TensorSpec("transformer.ln_f.weight", (width,)), TensorSpec("transformer.ln_f.bias", (width,))]
    return params


def lecture_parameters(
    num_tensors: int = 1000, tensor_bytes: int = 100_000, itemsize: int = 4
) -> list[TensorSpec]:
    """The lecture's section 5.3 example: 1000 gradients of 100 KB each (100 MB in all)."""
    if tensor_bytes % itemsize:
        raise UsageError(
            f"{tensor_bytes} is not a whole number of {itemsize}-byte elements", field="tensor_bytes"
        )
    return [TensorSpec(f"grad{i}", (tensor_bytes // itemsize,)) for i in range(num_tensors)]


ARCHITECTURES: dict[str, Callable[[], list[TensorSpec]]] = {
    "lecture": lecture_parameters,
    "resnet50": resnet50_parameters,
    "gpt2": gpt2_small_parameters,
}


def backward_order(name: str) -> list[TensorSpec]:
    """Gradients of architecture `name` in the order backward produces them (last layer first)."""
    if name not in ARCHITECTURES:
        raise UsageError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
    return list(reversed(ARCHITECTURES[name]()))


def gradient_elements(
    name: str, tensor_bytes: Sequence[int] | None = None, scale: float = 1.0, itemsize: int = 4
) -> list[int]:
    """Elements of each gradient in backward order: architecture `name`'s, or a custom list of
    byte sizes when given; times `scale` (at least one element each) to keep runs short."""
    if tensor_bytes:
        elems = [n // itemsize for n in tensor_bytes]
    else:
        elems = [t.num_elements for t in backward_order(name)]
    return elems if scale == 1 else [max(1, round(n * scale)) for n in elems]
