"""What rank 0 of the serving lab serves: the model, and one fresh ModelServer per setup.

The model is the training lab's `model.npz` (`params.model`) or fixed random weights of the same
GPT-2 shape (`layers`, `d_model`, `heads`, `context`, drawn from `model_seed`): a client rank
builds the same one to check what it is served. A setup is (policy, prefix caching): the
`prefix` workload runs every policy without and with prefix caching, the others as the scenario
says.
"""

from dataclasses import replace

from playground.core.errors import ParamError
from playground.kvcache.engine.config import DEFAULT_ENGINE
from playground.kvcache.server.generate import ModelServer
from playground.transformer.checkpoint import load_model
from playground.transformer.config import ModelConfig
from playground.transformer.model import Transformer


def model_config(p) -> ModelConfig:
    """The served model's config (reads only the header of a model file)."""
    if p.model:
        try:
            return load_model(p.model)[0]
        except OSError as e:
            raise ParamError("model", f"cannot read {p.model}: {e.strerror or e}") from None
    return ModelConfig(layers=p.layers, d_model=p.d_model, heads=p.heads, context=p.context)


def served_model(p) -> Transformer:
    if p.model:
        config, params = load_model(p.model)
        return Transformer(config, params)
    return Transformer(model_config(p), seed=p.model_seed)


def check_model(p) -> None:
    """A model file that does not fit the scenario is bad input naming its key (exit 2)."""
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


def new_serving_server(p, policy: str, prefix_caching: bool, model: Transformer) -> ModelServer:
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
    )
