"""ModelConfig's validation and derived sizes; the flat layout; GPT-2's initialisation."""

import math

import numpy as np
import pytest

from playground.core.errors import ParamError, UsageError
from playground.transformer import ModelConfig, ParamLayout, Transformer


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"layers": 0}, "layers"),
        ({"heads": 0}, "heads"),
        ({"heads": 3}, "heads"),  # does not divide d_model=64
        ({"d_model": -4}, "d_model"),
        ({"context": 0}, "context"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"layers": 2.0}, "layers"),
        ({"layers": True}, "layers"),
        ({"dtype": "float16"}, "dtype"),
    ],
)
def test_bad_values_name_their_key(kwargs, key):
    with pytest.raises(ParamError) as e:
        ModelConfig(**kwargs)
    assert e.value.field == key
    assert str(e.value).startswith(f"{key}: ")


def test_unknown_keys_are_refused_with_the_allowed_ones():
    with pytest.raises(ParamError, match="allowed: vocab_size, layers, d_model, heads, context, dtype") as e:
        ModelConfig.from_dict({"layers": 2, "n_embd": 64})
    assert e.value.field == "n_embd"
    c = ModelConfig(layers=3, d_model=24, heads=3, context=7, dtype="float64")
    assert ModelConfig.from_dict(c.to_dict()) == c


def test_derived_sizes():
    c = ModelConfig(layers=8, d_model=512, heads=8, context=128)
    assert c.head_dim == 64
    assert c.kv_width == 8 * 2 * 8 * 64
    assert c.kv_bytes_per_token == c.kv_width * 4
    assert c.num_params == ParamLayout.for_config(c).num_elements == 25_416_704  # about 100 MB of float32
    assert c.param_bytes == 4 * c.num_params


def test_layout_is_contiguous_in_forward_order_with_gpt2_names_and_shapes():
    c = ModelConfig(vocab_size=256, layers=2, d_model=8, heads=2, context=5)
    layout = ParamLayout.for_config(c)
    names = [s.name for s in layout]
    assert names[:4] == ["wte", "wpe", "h.0.ln_1.weight", "h.0.ln_1.bias"]
    assert names[-2:] == ["ln_f.weight", "ln_f.bias"]
    assert len(layout) == 2 + 12 * 2 + 2
    assert layout["wte"].shape == (256, 8) and layout["wpe"].shape == (5, 8)
    assert layout["h.1.attn.c_attn.weight"].shape == (8, 24)
    assert layout["h.1.mlp.c_proj.weight"].shape == (32, 8)
    offset = 0
    for i, spec in enumerate(layout):
        assert (spec.index, spec.offset) == (i, offset) and layout[spec.name] is spec
        offset = spec.stop
    assert offset == layout.num_elements == c.num_params
    assert layout["wpe"].byte_range(4) == (256 * 8 * 4, (256 + 5) * 8 * 4)
    assert layout.to_json()[1] == ["wpe", 2048, [5, 8]]
    with pytest.raises(UsageError):
        layout["lm_head.weight"]


def test_views_are_the_flat_buffers_own_memory():
    model = Transformer(ModelConfig(layers=1, d_model=8, heads=2, context=4))
    model.p["h.0.mlp.c_fc.bias"][3] = 42
    spec = model.layout["h.0.mlp.c_fc.bias"]
    assert model.params[spec.offset + 3] == 42
    for name, view in model.g.items():
        assert np.shares_memory(view, model.grads), name
    with pytest.raises(UsageError, match="params"):
        Transformer(model.config, np.zeros(model.params.size, np.float64))


def test_gpt2_initialisation_is_seeded_and_the_same_in_both_dtypes():
    c = ModelConfig(layers=4, d_model=64, heads=4, context=32)
    a, b = Transformer(c, seed=7), Transformer(c, seed=7)
    assert a.params.tobytes() == b.params.tobytes()
    assert a.params.tobytes() != Transformer(c, seed=8).params.tobytes()
    wide = Transformer(ModelConfig(layers=4, d_model=64, heads=4, context=32, dtype="float64"), seed=7)
    assert (wide.params.astype(np.float32) == a.params).all()
    p = wide.p
    assert (
        (p["h.2.ln_1.weight"] == 1).all()
        and (p["ln_f.bias"] == 0).all()
        and (p["h.3.mlp.c_fc.bias"] == 0).all()
    )
    assert p["wte"].std() == pytest.approx(0.02, rel=0.05)
    assert p["h.0.mlp.c_fc.weight"].std() == pytest.approx(0.02, rel=0.05)
    assert p["h.1.attn.c_proj.weight"].std() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert p["h.1.mlp.c_proj.weight"].std() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
