"""`python -m playground serve`: the paged engine over HTTP with OpenAI's routes (serving/http/).

Its packages (Starlette, uvicorn, prometheus-client) are the optional extra `serve`; without them
the command says how to install them (exit 2) and nothing else in the playground needs them.
"""

import argparse

from playground.core.errors import ParamError, ScenarioError, UsageError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.policies import POLICIES

SERVE_EXTRA = "pip install -e '.[serve]'"


def add_serve_parser(sub, func) -> None:
    s = sub.add_parser(
        "serve",
        help="serve a trained model over HTTP: OpenAI's completions and chat routes, /metrics",
        description="Serves the newest model.npz of `run train` (or --model) from the paged KV cache "
        "with the OpenAI routes /v1/models, /v1/completions, /v1/chat/completions (streaming as "
        "server-sent events), /health and Prometheus' /metrics. Ctrl-C cancels what is in flight "
        "and exits 130. Needs the serve extra: " + SERVE_EXTRA,
    )
    s.add_argument(
        "--model",
        default="latest",
        help="latest (the newest model.npz under --runs; random weights if none), random, a model.npz "
        "or a run directory holding one (default: latest)",
    )
    s.add_argument("--runs", default="runs", help="where `latest` looks: run train's --out (default: runs)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed)")
    s.add_argument("--served-model-name", default="playground", help="the model's name in requests")
    s.add_argument(
        "--max-model-len",
        type=int,
        help="prompt + output tokens a request may hold (default: the model's context; longer slides the "
        "window as generate does)",
    )
    s.add_argument("--max-n", type=int, default=16, help="samples a request may ask for (default 16)")
    s.add_argument("--policy", choices=list(POLICIES), default="paged", help="KV allocation (default paged)")
    s.add_argument("--block-size", type=int, default=16, help="tokens a KV block (default 16)")
    s.add_argument(
        "--capacity-tokens", type=int, default=65536, help="KV pool size in tokens (default 65536)"
    )
    s.add_argument("--max-num-seqs", type=int, default=256, help="running sequences at most (default 256)")
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
        default=0,
        metavar="K",
        help="draft K tokens a step by prompt lookup for greedy requests (default 0: off)",
    )
    g = s.add_argument_group("random weights (--model random, or latest with nothing trained)")
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--d-model", type=int, default=64)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--context", type=int, default=256)
    g.add_argument("--model-seed", type=int, default=0)
    s.set_defaults(func=func)


def serve_config(args: argparse.Namespace):
    """The ServeConfig the flags say (bad values: a ParamError naming the flag)."""
    from playground.serving.http.server import ServeConfig
    from playground.transformer.config import ModelConfig

    chunked = args.chunked_prefill
    budget = args.max_num_batched_tokens or (256 if chunked else 8192)
    try:
        engine = EngineConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=budget,
            chunked_prefill=chunked,
            num_speculative_tokens=args.speculative_tokens,
        )
    except UsageError as e:
        flag = {"num_speculative_tokens": "--speculative-tokens"}.get(
            e.field, "--" + e.field.replace("_", "-")
        )
        raise ParamError(flag, e.message) from None
    try:
        shape = ModelConfig(layers=args.layers, d_model=args.d_model, heads=args.heads, context=args.context)
    except ParamError as e:
        raise ParamError("--" + e.field.replace("_", "-"), e.message) from None
    return ServeConfig(
        model=args.model,
        runs_dir=args.runs,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        random_shape=shape,
        model_seed=args.model_seed,
        max_model_len=args.max_model_len,
        max_n=args.max_n,
        policy=args.policy,
        block_size=args.block_size,
        capacity_tokens=args.capacity_tokens,
        prefix_caching=args.prefix_caching,
        engine=engine,
    )


def run_serve(args: argparse.Namespace) -> int:
    try:
        from playground.serving.http.server import serve
    except ImportError as e:
        raise ScenarioError(f"serve needs the serve extra ({e.name} is missing): {SERVE_EXTRA}") from None
    return serve(serve_config(args))
