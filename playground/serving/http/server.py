"""`python -m playground serve`: the paged engine behind the OpenAI routes, over uvicorn.

What it serves (`ServeConfig.model`, as `run serving` finds it, served.py): `latest`, the newest
float32 model.npz under the runs directory (what the last `run train` saved), else random weights,
said plainly; a model.npz or a run directory holding one; or `random`: fixed random weights of the
shape given (`layers`, `d_model`, `heads`, `context`, seed `model_seed`).

The process: the model and the engine are built, the engine loop's thread started, the socket
bound (port 0: any free one; the line "serving ... on http://HOST:PORT" says which), then uvicorn
runs the app until Ctrl-C or SIGTERM. On the signal every request in flight is cancelled at once
(its handler answers, its stream ends with an error event, its blocks are freed) so uvicorn's
graceful shutdown does not wait for them; then the engine thread is joined and the socket closed,
and Ctrl-C exits 130 (uvicorn raises the signal again once it is done). numpy's BLAS runs on one
thread (`serve`).
"""

import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from playground.core.errors import ParamError, UsageError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.policies import POLICIES, make_policy
from playground.kvcache.engine.tensor_parallel import SeqIds
from playground.serving.http.app import Served, build_app
from playground.serving.http.engine_loop import EngineLoop
from playground.serving.http.idempotency import Idempotency
from playground.serving.http.metrics import ServingMetrics
from playground.serving.http.openai_protocol import Limits
from playground.serving.served import LATEST, RANDOM, TRAIN_HINT, latest_trained, model_file, trained_how
from playground.transformer.blas import pin_blas_threads
from playground.transformer.checkpoint import load_model
from playground.transformer.config import ModelConfig
from playground.transformer.model import Transformer


@dataclass(frozen=True)
class ServeConfig:
    model: str = LATEST  # latest | random | a model.npz | a run directory
    runs_dir: str = "runs"  # where `latest` looks (run train's --out)
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    served_model_name: str = "playground"
    random_shape: ModelConfig = field(default_factory=lambda: ModelConfig(context=256))
    model_seed: int = 0
    max_model_len: int | None = None  # default: the model's context; longer slides its window
    max_n: int = 16
    policy: str = "paged"
    block_size: int = 16
    capacity_tokens: int = 65536
    prefix_caching: bool = False
    engine: EngineConfig = EngineConfig(max_num_seqs=256)
    journal: str | None = None  # the idempotency keys' answers, kept across restarts (idempotency.py)

    def __post_init__(self):
        if not 0 <= self.port <= 65535:
            raise ParamError("--port", f"must be in 0..65535 (0: a free port), got {self.port}")
        if self.policy not in POLICIES:
            raise ParamError("--policy", f"allowed: {', '.join(POLICIES)}; got {self.policy!r}")
        for name in ("max_n", "block_size", "capacity_tokens"):
            if getattr(self, name) < 1:
                raise ParamError(f"--{name.replace('_', '-')}", f"must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ParamError("--max-model-len", f"must be >= 2, got {self.max_model_len}")
        if self.prefix_caching and self.engine.chunked_prefill:
            raise ParamError(
                "--prefix-caching", "does not combine with --chunked-prefill here (docs/serving.md)"
            )


def load_served_model(config: ServeConfig) -> tuple[Transformer, str]:
    """The model and one line saying what it is (and, for random weights, why)."""
    spec, why = config.model, ""
    if spec == LATEST:
        found = latest_trained(Path(config.runs_dir))
        spec = str(found) if found else RANDOM
        why = (
            ""
            if found
            else f": no trained model.npz under {config.runs_dir}/, so it writes noise (train one with `{TRAIN_HINT}`)"
        )
    if spec == RANDOM:
        c = config.random_shape
        shape = f"{c.layers} layers, d_model {c.d_model}, {c.heads} heads, context {c.context}"
        return Transformer(
            c, seed=config.model_seed
        ), f"random weights ({shape}, seed {config.model_seed}){why}"
    path = model_file(spec)
    try:
        c, params = load_model(path)
    except (OSError, ValueError) as e:
        raise ParamError("--model", f"{path} is not a model file ({e})") from None
    if c.dtype != "float32" or c.vocab_size != 256:
        raise ParamError(
            "--model", f"{path}: serves byte-level float32 models, not {c.dtype} of vocab {c.vocab_size}"
        )
    shape = f"{c.layers} layers, d_model {c.d_model}, {c.heads} heads, context {c.context}"
    return Transformer(c, params), f"{path} ({shape}{trained_how(path.parent)})"


def build_served(config: ServeConfig, model: Transformer) -> Served:
    """The engine over a fresh pool, its loop (not started, and able to build a new engine when a
    step fails), the limits, the metrics."""
    c = model.config
    max_model_len = config.max_model_len or c.context
    window = min(max_model_len, c.context)  # a longer request slides its window: this much KV at most
    if config.capacity_tokens < window + config.block_size:
        raise ParamError(
            "--capacity-tokens",
            f"must hold one request's window ({window} tokens) and a block, got {config.capacity_tokens}",
        )

    def new_engine() -> LLMEngine:  # a fresh pool: the first engine's, and one after a failed step
        policy = make_policy(
            config.policy, config.capacity_tokens, config.block_size, config.prefix_caching, window
        )
        layout = KVLayout(c.layers, c.heads, c.head_dim)
        pool = KVPool(policy.capacity_slots, layout.width, layout)
        return LLMEngine(
            model, policy, pool, config.engine, new_seq_ids=SeqIds(), prefix_caching=config.prefix_caching
        )

    engine = new_engine()
    metrics = ServingMetrics(config.block_size, engine.policy.capacity_slots // config.block_size)
    loop = EngineLoop(
        engine, metrics.on_step, metrics.on_finish, rebuild=new_engine, on_restart=metrics.on_restart
    )
    limits = Limits(config.served_model_name, max_model_len, config.max_n, c.vocab_size)
    try:
        idempotency = Idempotency(config.journal)
    except UsageError as e:
        raise ParamError("--journal", e.message) from None
    return Served(loop, limits, metrics, int(time.time()), idempotency)


class _Server(uvicorn.Server):
    """uvicorn's server that cancels the engine's requests on the first signal, so that its
    graceful shutdown finds no response still streaming."""

    def __init__(self, uv_config: uvicorn.Config, loop: EngineLoop):
        super().__init__(uv_config)
        self.engine_loop = loop

    def handle_exit(self, sig, frame) -> None:
        self.engine_loop.cancel_all()
        super().handle_exit(sig, frame)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ParamError("--port", f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)  # listening before the line that names the port: a client may connect at once
    sock.set_inheritable(True)
    return sock


def serve(config: ServeConfig) -> int:
    """Serve until a signal; Ctrl-C raises KeyboardInterrupt once everything is released. BLAS runs
    on one thread, as in every rank: the engine's thread and the event loop's share the cores, and
    BLAS threads spinning beside them make a short prefill take a second on a busy machine."""
    pin_blas_threads(1)
    model, what = load_served_model(config)
    served = build_served(config, model)
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    uv_config = uvicorn.Config(
        build_app(served), log_level="warning", access_log=False, timeout_graceful_shutdown=5, lifespan="off"
    )
    server = _Server(uv_config, served.loop)
    served.loop.start()
    try:
        print(f"serving model: {what}", flush=True)
        if config.journal:
            kept = served.idempotency.table.num_answers
            print(f"journal: {config.journal} ({kept} answer(s) kept from before)", flush=True)
        print(
            f"serving {config.served_model_name!r} on {url} (OpenAI routes /v1/completions, /v1/chat/completions; "
            f"/metrics, /health); Ctrl-C stops",
            flush=True,
        )
        server.run(sockets=[sock])
    finally:
        served.loop.stop()
        served.idempotency.close()
        sock.close()
    if served.loop.failure:
        print(f"error: {served.loop.failure}", file=sys.stderr)
        return 1
    return 0
