"""What rank 0 of the serving lab serves: the model, and one fresh ModelServer per setup.

The model (`params.model`) is one the training lab saved, or fixed random weights of the same
GPT-2 shape (`layers`, `d_model`, `heads`, `context`, drawn from `model_seed`): a client rank
builds the same one to check what it is served. `params.model` is
- `latest`: the newest `model.npz` among the run directories beside this run's (what the last
  `run train` with the same `--out` saved), random weights if there is none;
- a `model.npz`, or a run directory holding one;
- `random` (or null): the random weights.
`resolve` turns `latest` and a directory into the file, once per rank, before anything is built.
A setup is (policy, prefix caching): the `prefix` workload runs every policy without and with
prefix caching, the others as the scenario says.
"""

import json
from dataclasses import replace
from pathlib import Path

from playground.core.errors import ParamError
from playground.kvcache.engine.config import DEFAULT_ENGINE
from playground.kvcache.server.generate import ModelServer
from playground.transformer.checkpoint import load_model
from playground.transformer.config import ModelConfig
from playground.transformer.model import Transformer

LATEST, RANDOM = "latest", "random"
TRAIN_HINT = "python -m playground run train"


def model_file(spec: str) -> Path:
    """`params.model` as given: a model.npz, or a run directory holding one."""
    path = Path(spec)
    if path.is_dir():
        if not (path / "model.npz").is_file():
            raise ParamError(
                "model",
                f"{path} is a directory without model.npz (a run directory of `{TRAIN_HINT}` holds one)",
            )
        return path / "model.npz"
    if not path.is_file():
        raise ParamError(
            "model",
            f"{path} does not exist; give a model.npz, a run directory holding one, {LATEST} or {RANDOM}",
        )
    return path


def latest_trained(runs_dir: Path) -> Path | None:
    """The newest model.npz among `runs_dir`'s run directories that the pool can serve."""
    found = sorted(runs_dir.glob("*/model.npz"), key=lambda f: f.stat().st_mtime, reverse=True)
    for f in found:
        try:
            if load_model(f)[0].dtype == "float32":
                return f
        except (ParamError, OSError, ValueError):
            continue
    return None


def resolve(p, runs_dir: Path | None):
    """`p` with `model` a model file, or None for the random weights (see the module doc)."""
    if p.model in (None, RANDOM):
        return replace(p, model=None)
    if p.model == LATEST:
        found = latest_trained(runs_dir) if runs_dir else None
        return replace(p, model=str(found) if found else None)
    return replace(p, model=str(model_file(p.model)))


def describe(p, asked: str | None) -> str:
    """Which model was served, in one line: the file, and the training run that wrote it; or
    that the weights are random, and, where the last trained model was `asked` for, how to
    train one."""
    config = model_config(p)
    shape = (
        f"{config.layers} layers, d_model {config.d_model}, {config.heads} heads, context {config.context}"
    )
    if p.model:
        return f"served model: {p.model} ({shape}{trained_how(Path(p.model).parent)})"
    if asked != LATEST:
        return f"served model: random weights ({shape}, seed {p.model_seed})"
    return (
        f"served model: random weights ({shape}, seed {p.model_seed}): no trained model.npz beside this run, so "
        f"it writes noise. Train one with `{TRAIN_HINT}` (about a minute); `run serving` then serves the newest "
        "model.npz under the same --out"
    )


def trained_how(run_dir: Path) -> str:
    """', trained N steps, final loss L' from the training run's result.json, if it is there."""
    try:
        result = json.loads((run_dir / "result.json").read_text())
        mode = result["modes"][0]
        return f", trained {len(mode['losses'])} steps ({mode['mode']}), final loss {mode['losses'][-1]:.3f}"
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return ""


def model_config(p) -> ModelConfig:
    """The served model's config (reads only the header of a model file)."""
    if p.model:
        try:
            return load_model(p.model)[0]
        except OSError as e:
            raise ParamError("model", f"cannot read {p.model}: {e.strerror or e}") from None
        except ValueError as e:  # not an .npz archive, or not ours
            raise ParamError("model", f"{p.model} is not a model file ({e})") from None
    return ModelConfig(layers=p.layers, d_model=p.d_model, heads=p.heads, context=p.context)


def served_model(p) -> Transformer:
    if p.model:
        config, params = load_model(p.model)
        return Transformer(config, params)
    return Transformer(model_config(p), seed=p.model_seed)


def check_model(p) -> None:
    """A model file that does not fit the scenario is bad input naming its key (exit 2).
    `latest` is resolved where the run directory is known; here its fallback, the random
    model's shape, is checked."""
    p = resolve(p, None)
    config = model_config(p)
    key = "params.model" if p.model else "params.context"
    if config.dtype != "float32":
        raise ParamError(key, f"the pool holds float32 KV; {p.model} holds a {config.dtype} model")
    if p.width is not None and p.width != config.kv_width:
        raise ParamError(
            key if p.model else "params.width",
            f"a model of KV width {config.kv_width} ({config.layers} layers x 2 x {config.heads} heads x "
            f"{config.head_dim}) does not match params.width={p.width}",
        )


def setups(p) -> list[tuple[str, bool]]:
    caching = (False, True) if p.workload == "prefix" else (p.prefix_caching,)
    return [(policy, c) for policy in p.policies for c in caching if not (c and policy != "paged")]


def new_serving_server(
    p, policy: str, prefix_caching: bool, model: Transformer, journal: Path | None = None
) -> ModelServer:
    """The setup's server; `journal`: where it keeps the answers it gave (resume.py)."""
    engine = replace(
        DEFAULT_ENGINE,
        max_num_seqs=p.max_num_seqs,
        max_num_batched_tokens=p.max_num_batched_tokens,
        watermark=p.watermark,
        kernel=p.kernel,
    )
    return ModelServer(
        policy,
        p.capacity_tokens,
        p.block_size,
        model,
        lease_s=p.lease_s,
        enable_prefix_caching=prefix_caching,
        max_new_tokens=p.max_new_tokens,
        check_invariants=p.check_invariants,
        engine_config=engine,
        journal=str(journal) if journal is not None else None,
    )
