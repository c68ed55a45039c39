"""model.npz: the flat parameters, the config (JSON) and the layout (JSON), nothing pickled.

The layout is stored so that a reader without this package (or a later version of it) can still
find each tensor; `load_model` checks it against the layout the config implies, so a file written
by a model of another shape is refused with the key that differs, not misread.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from playground.core.errors import ParamError
from playground.transformer.config import ModelConfig
from playground.transformer.layout import ParamLayout

ZIP_MAGIC = b"PK\x03\x04"  # an .npz is a zip archive: its first local file header


def save_model(path: str | Path, config: ModelConfig, params: np.ndarray) -> None:
    layout = ParamLayout.for_config(config)
    layout.views(params)  # checks the buffer fits
    with open(path, "wb") as f:  # a file object: np.savez would append .npz to another name
        np.savez(
            f, params=params, config=np.array(config.to_json()), layout=np.array(json.dumps(layout.to_json()))
        )


def load_model(
    path: str | Path, expect: ModelConfig | Mapping[str, Any] | None = None
) -> tuple[ModelConfig, np.ndarray]:
    """(config, flat params) from `path`. `expect` (a config, or a mapping of some of its keys)
    is what the caller needs: a file that differs in any of those keys raises a ParamError
    naming the key, the file's value and the expected one; a file that is no .npz archive at all
    (which numpy would take for a pickle it refuses to load, and say so) is "not a model file"."""
    with open(path, "rb") as raw:  # OSError (no such file, no permission) is the caller's to name
        if raw.read(4) != ZIP_MAGIC:
            raise ParamError("model", f"{path} is not a model file (the model.npz that `run train` writes)")
    with np.load(path, allow_pickle=False) as f:
        missing = {"params", "config", "layout"} - set(f.files)
        if missing:
            raise ParamError("model", f"{path} is not a model file: no {', '.join(sorted(missing))}")
        config = ModelConfig.from_dict(json.loads(str(f["config"])))
        layout_json = json.loads(str(f["layout"]))
        params = np.ascontiguousarray(f["params"])
    wanted = expect.to_dict() if isinstance(expect, ModelConfig) else dict(expect or {})
    found = config.to_dict()
    for key, value in wanted.items():
        if key not in found:
            raise ParamError(key, f"unknown model key; allowed: {', '.join(found)}")
        if found[key] != value:
            raise ParamError(key, f"{path} holds a model with {key}={found[key]!r}, expected {value!r}")
    layout = ParamLayout.for_config(config)
    if (
        layout_json != layout.to_json()
        or params.shape != (layout.num_elements,)
        or params.dtype != config.np_dtype
    ):
        raise ParamError(
            "model",
            f"{path}: parameters ({params.dtype}, {params.size} elements) or layout do not match its config "
            f"({config.dtype}, {layout.num_elements} elements)",
        )
    return config, params
