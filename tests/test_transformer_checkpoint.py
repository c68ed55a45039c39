"""model.npz: round trip, and files that are not what the caller expects."""

import json

import numpy as np
import pytest

from playground.core.errors import ParamError
from playground.transformer import ModelConfig, Transformer, load_model, save_model


@pytest.fixture
def saved(tmp_path):
    config = ModelConfig(layers=2, d_model=16, heads=4, context=8, dtype="float32")
    model = Transformer(config, seed=3)
    path = tmp_path / "model.npz"
    save_model(path, config, model.params)
    return path, model


def test_round_trip_is_exact_and_holds_config_and_layout(saved):
    path, model = saved
    config, params = load_model(path, expect=model.config)
    assert config == model.config
    assert params.tobytes() == model.params.tobytes()
    again = Transformer(config, params)
    tokens = np.arange(8)[None]
    np.testing.assert_array_equal(again.logits(tokens), model.logits(tokens))
    with np.load(path, allow_pickle=False) as f:
        assert json.loads(str(f["config"]))["d_model"] == 16
        assert json.loads(str(f["layout"]))[0] == ["wte", 0, [256, 16]]


def test_a_file_of_another_shape_is_refused_naming_the_key(saved):
    path, model = saved
    with pytest.raises(ParamError, match="d_model=16, expected 32") as e:
        load_model(path, expect=ModelConfig(layers=2, d_model=32, heads=4, context=8))
    assert e.value.field == "d_model"
    with pytest.raises(ParamError) as e:
        load_model(path, expect={"dtype": "float64"})
    assert e.value.field == "dtype"
    with pytest.raises(ParamError) as e:
        load_model(path, expect={"width": 3})
    assert e.value.field == "width"


def test_a_file_that_is_not_a_model_or_disagrees_with_itself_is_refused(tmp_path, saved):
    path, model = saved
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    with pytest.raises(ParamError, match="not a model file"):
        load_model(other)
    truncated = tmp_path / "truncated.npz"
    with np.load(path) as f:
        np.savez(truncated, params=f["params"][:-1], config=f["config"], layout=f["layout"])
    with pytest.raises(ParamError, match="do not match"):
        load_model(truncated)
