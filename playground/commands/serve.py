"""`python -m playground serve`: the paged engine over HTTP with OpenAI's routes (serving/http/).

Its packages (Starlette, uvicorn, prometheus-client) are the optional extra `serve`; without them
the command says how to install them (exit 2) and nothing else in the playground needs them.
"""

import argparse
from typing import TYPE_CHECKING

from playground.core.errors import ParamError, ScenarioError, UsageError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.policies import POLICIES

if TYPE_CHECKING:  # the serve extra's modules: imported when the command runs
    from playground.serving.http.server import ServeConfig

SERVE_EXTRA = "pip install -e '.[serve]'"


HELP = "serve a trained model over HTTP: OpenAI's completions and chat routes, /metrics"
DESCRIPTION = (
    "Serves the newest model.npz of `run train` (or --model) from the paged KV cache with the OpenAI "
    "routes /v1/models, /v1/completions, /v1/chat/completions (streaming as server-sent events), /health "
    "and Prometheus' /metrics. Ctrl-C cancels what is in flight and exits 130. Needs the serve extra: "
    + SERVE_EXTRA
)


def add_serve_flags(s: argparse.ArgumentParser) -> None:
    """`serve`'s flags; their defaults are `serve_config`'s."""
    s.add_argument(
        "--model",
        help="latest (the newest model.npz under --runs; random weights if none), random, a model.npz "
        "or a run directory holding one (default: latest)",
    )
    s.add_argument("--runs", help="where `latest` looks: run train's --out (default: runs)")
    s.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default 8000; 0: a free one, printed)")
    s.add_argument("--served-model-name", help="the model's name in requests (default playground)")
    s.add_argument(
        "--max-model-len",
        type=int,
        help="prompt + output tokens a request may hold (default: the model's context; longer slides the "
        "window as generate does)",
    )
    s.add_argument("--max-n", type=int, help="samples a request may ask for (default 16)")
    s.add_argument("--policy", choices=list(POLICIES), help="KV allocation (default paged)")
    s.add_argument("--block-size", type=int, help="tokens a KV block (default 16)")
    s.add_argument("--capacity-tokens", type=int, help="KV pool size in tokens (default 65536)")
    s.add_argument("--max-num-seqs", type=int, help="running sequences at most (default 256)")
    s.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="tokens a step: prefill tokens (default 8192), or the whole step's budget with "
        "--chunked-prefill (default 256)",
    )
    s.add_argument(
        "--chunked-prefill", action="store_true", help="split long prompts into chunks beside decodes"
    )
    s.add_argument(
        "--prefix-caching", action="store_true", help="share cached prompt blocks between requests"
    )
    s.add_argument(
        "--speculative-tokens",
        type=int,
        metavar="K",
        help="draft K tokens a step by prompt lookup for greedy requests (default 0: off)",
    )
    s.add_argument(
        "--journal",
        metavar="FILE",
        help="keep the answers of requests sent with an Idempotency-Key header in FILE, so that a server "
        "started again on it answers a re-sent request once (default: kept in memory only)",
    )
    g = s.add_argument_group("random weights (--model random, or latest with nothing trained)")
    g.add_argument("--layers", type=int)
    g.add_argument("--d-model", type=int)
    g.add_argument("--heads", type=int)
    g.add_argument("--context", type=int)
    g.add_argument("--model-seed", type=int)


def serve_config(
    *,
    model: str = "latest",
    runs: str = "runs",
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str = "playground",
    max_model_len: int | None = None,
    max_n: int = 16,
    policy: str = "paged",
    block_size: int = 16,
    capacity_tokens: int = 65536,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
    chunked_prefill: bool = False,
    prefix_caching: bool = False,
    speculative_tokens: int = 0,
    journal: str | None = None,
    layers: int = 2,
    d_model: int = 64,
    heads: int = 4,
    context: int = 256,
    model_seed: int = 0,
) -> "ServeConfig":
    """The ServeConfig the flags say (bad values: a ParamError naming the flag); without the serve
    extra, one line saying how to install it."""
    try:
        from playground.serving.http.server import ServeConfig
    except ImportError as e:
        raise ScenarioError(f"serve needs the serve extra ({e.name} is missing): {SERVE_EXTRA}") from None
    from playground.transformer.config import ModelConfig

    engine = _engine(max_num_seqs, max_num_batched_tokens, chunked_prefill, speculative_tokens)
    try:
        shape = ModelConfig(layers=layers, d_model=d_model, heads=heads, context=context)
    except ParamError as e:
        raise ParamError("--" + e.field.replace("_", "-"), e.message) from None
    return ServeConfig(
        model=model,
        runs_dir=runs,
        host=host,
        port=port,
        served_model_name=served_model_name,
        random_shape=shape,
        model_seed=model_seed,
        max_model_len=max_model_len,
        max_n=max_n,
        policy=policy,
        block_size=block_size,
        capacity_tokens=capacity_tokens,
        prefix_caching=prefix_caching,
        engine=engine,
        journal=journal,
    )


def _engine(
    max_num_seqs: int, max_num_batched_tokens: int | None, chunked_prefill: bool, speculative_tokens: int
) -> EngineConfig:
    """The engine's scheduling: its token budget a step by default 8192 prefill tokens, or 256 for
    the whole step with chunked prefill."""
    budget = max_num_batched_tokens or (256 if chunked_prefill else 8192)
    try:
        return EngineConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            chunked_prefill=chunked_prefill,
            num_speculative_tokens=speculative_tokens,
        )
    except UsageError as e:
        flag = {"num_speculative_tokens": "--speculative-tokens"}.get(
            e.field, "--" + e.field.replace("_", "-")
        )
        raise ParamError(flag, e.message) from None


def run_serve(config: "ServeConfig") -> int:
    from playground.serving.http.server import serve

    return serve(config)
