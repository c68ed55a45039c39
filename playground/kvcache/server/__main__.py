"""The standalone KV-cache server, for any ZeroMQ client.

A KVServer (a ModelServer with --model or --random-model) behind the ROUTER loop (loop.py):
    python -m playground.kvcache.server --bind tcp://127.0.0.1:5555 --policy paged
    python -m playground.kvcache.server --width 8 --layers 1 --heads 1      # KV that attend can read
    python -m playground.kvcache.server --random-model --context 512        # serve generate
    python -m playground.kvcache.server --model model.npz                   # the training lab's model
    python -m playground.kvcache.server --random-model --journal answers.jsonl  # answers outlive a crash
"""

import signal
from dataclasses import replace

import zmq

from playground.core.argparser import OneLineParser
from playground.core.errors import PlaygroundError, UsageError
from playground.kvcache.engine.attention import KERNELS
from playground.kvcache.engine.config import DEFAULT_ENGINE
from playground.kvcache.engine.kv_pool import KVLayout
from playground.kvcache.engine.policies import POLICIES
from playground.kvcache.server.generate import ModelServer
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.loop import router_socket, serve
from playground.transformer.model import Transformer


def build_model(args) -> Transformer | None:
    """The standalone server's model: a model.npz, or fixed random weights, or none."""
    from playground.transformer import ModelConfig, load_model

    if args.model:
        config, params = load_model(args.model)
        return Transformer(config, params)
    if args.random_model:
        config = ModelConfig(
            layers=args.layers or 2, d_model=args.d_model, heads=args.heads or 4, context=args.context
        )
        return Transformer(config, seed=args.seed)
    return None


def build_parser() -> OneLineParser:
    ap = OneLineParser(prog="python -m playground.kvcache.server", description=__doc__.split("\n")[0])
    ap.add_argument("--bind", default="tcp://127.0.0.1:5555", help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:*")
    ap.add_argument("--policy", default="paged", choices=list(POLICIES))
    ap.add_argument("--capacity-tokens", type=int, default=200_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument(
        "--width", type=int, default=None, help="KV floats per token (default 8; a model sets it)"
    )
    ap.add_argument("--lease-s", type=float, default=30.0)
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=2048, help="reserve_max reserves prompt + this")
    m = ap.add_argument_group("attention and models")
    m.add_argument(
        "--layers", type=int, default=None, help="KV layout: layers (head_dim = width / (2 layers heads))"
    )
    m.add_argument("--heads", type=int, default=None, help="KV layout: heads per layer")
    m.add_argument("--model", default=None, metavar="FILE", help="serve this model.npz (generate)")
    m.add_argument("--random-model", action="store_true", help="serve fixed random weights (generate)")
    m.add_argument("--d-model", type=int, default=64, help="random model: width (default 64)")
    m.add_argument("--context", type=int, default=1024, help="random model: context (default 1024)")
    m.add_argument("--seed", type=int, default=0, help="random model: the weights' seed")
    m.add_argument("--kernel", choices=KERNELS, default="native", help="decode attention kernel")
    m.add_argument(
        "--journal",
        default=None,
        metavar="FILE",
        help="keep the answered generate ids in FILE: started again on it, the server answers a re-sent "
        "id the old one finished with the same reply (answers.py)",
    )
    return ap


def build_server(args) -> KVServer:
    """The server the flags describe: a ModelServer with a model, else a KVServer of KV slots (with
    a layout that attention can read when --layers or --heads are given); UsageError if they do
    not fit."""
    model = build_model(args)
    if model is not None:
        return ModelServer(
            args.policy,
            args.capacity_tokens,
            args.block_size,
            model,
            lease_s=args.lease_s,
            enable_prefix_caching=args.prefix_caching,
            max_new_tokens=args.max_new_tokens,
            engine_config=replace(DEFAULT_ENGINE, kernel=args.kernel),
            journal=args.journal,
        )
    if args.journal:
        raise UsageError(
            "a journal keeps generate answers: serve a model (--model or --random-model)", field="--journal"
        )
    width = args.width if args.width is not None else 8
    layout = None
    if args.layers or args.heads:
        layers, heads = args.layers or 1, args.heads or 1
        if width % (2 * layers * heads):
            raise UsageError(
                f"{width} is not layers x 2 x heads x head_dim for {layers} layers, {heads} heads",
                field="--width",
            )
        layout = KVLayout(layers, heads, width // (2 * layers * heads))
    return KVServer(
        args.policy,
        args.capacity_tokens,
        args.block_size,
        width,
        args.lease_s,
        args.prefix_caching,
        args.max_new_tokens,
        layout=layout,
        kernel=args.kernel,
    )


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        server = build_server(args)
    except (UsageError, PlaygroundError) as e:
        ap.error(str(e))
    ctx = zmq.Context()
    sock = router_socket(ctx)
    sock.bind(args.bind)
    print(f"serving {server!r} on {sock.getsockopt_string(zmq.LAST_ENDPOINT)}", flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop cleanly, also when started in the background
        signal.signal(sig, _stop)
    try:
        serve(server, sock)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        sock.close(0)
        ctx.term()
    return 0


def _stop(signum, frame):
    """SIGINT or SIGTERM: leave the loop (exit 0). A shell starts a background job with SIGINT
    ignored, which Python would keep: set here, Ctrl-C and kill both stop the server."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
