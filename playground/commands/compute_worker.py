"""One measurement of `bench compute`, in a process of its own (compute_bench.py starts it with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from its environment: OpenBLAS reads them when numpy
loads it, so only a fresh process can run without them).

    python -m playground.commands.compute_worker SPEC_JSON     -> one JSON object on stdout

A spec is either {"what": "machine", "dtype": ...}: the matrix-multiply rate of numpy's BLAS and of
torch's and the copy bandwidth, on one thread (the roofline's two ceilings), and which libraries and
kernels ran; or {"what": "shape", "config": ..., "batch": ..., "rounds": ..., "systems": [...]}:
forward + backward of that model on one rank's batch by each system (`native`: our model on its
native kernels, their products on numpy's own BLAS; `mkl`: the same kernels, their products on
MKL's; `numpy`: on the numpy reference; `torch`: training/ddp_model.py's model, the same weights
and batch) in alternating rounds, then each one's optimizer step (Adam, torch.optim.Adam for
torch) the same way, then a profile of our step on each of our kernel sets (transformer/profile.py).
Every system runs on one thread, as a training rank does (threadpoolctl for the BLAS,
torch.set_num_threads(1)), with freed memory kept (`keep_freed_memory`, as a rank does).
"""

import json
import os
import sys
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_info

from playground.core.machine import keep_freed_memory
from playground.transformer import BatchSampler, ModelConfig, Transformer, fused, lecture_bytes
from playground.transformer.blas import bind_blas, bound_blas, pin_blas_threads
from playground.transformer.fused import kernel_isa
from playground.transformer.init import init_params
from playground.transformer.optim import Adam, AdamConfig
from playground.transformer.profile import profile_steps

ROUND_S = 0.3  # each system's share of a round: as many steps as the slowest fills it with
MATMUL_SIZE = 1024  # the peak: a square product this large, best of MATMUL_REPEATS
MATMUL_REPEATS = 5
COPY_BYTES = 64 << 20  # the bandwidth: np.copyto of this many bytes, best of COPY_REPEATS
COPY_REPEATS = 5
SEED = 0
ADAM = AdamConfig(lr=1e-3)  # nanoGPT's betas (0.9, 0.95), torch's eps: as the DDP baseline's
BLAS_OF = {"native": "numpy", "mkl": "mkl"}  # our native systems: the library their products call


def _bind(system: str) -> None:
    """Our products on `system`'s BLAS from now on (rebinding is a lookup: the libraries stay open);
    nothing for numpy and torch."""
    if system in BLAS_OF:
        bind_blas(BLAS_OF[system])


def _best_s(fn: Callable, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def machine(dtype: str, with_torch: bool, with_mkl: bool = False) -> dict:
    """The ceilings and what ran: GFLOP/s of a MATMUL_SIZE^3 product (numpy's BLAS, our native
    products on it, on MKL's if `with_mkl`, and torch's if `with_torch`), GB/s of a copy (bytes read
    + written), the BLAS libraries threadpoolctl finds, our kernels' ISA."""
    bound_blas()  # opened first (MKL too, if installed), so that its pool is among threadpoolctl's below
    n = MATMUL_SIZE
    rng = np.random.default_rng(SEED)
    a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    flops = 2.0 * n**3
    out: dict = {"numpy_gflops": flops / _best_s(lambda: a @ b, MATMUL_REPEATS) / 1e9}
    for system in ("mkl", "native") if with_mkl else ("native",):  # native's binding left in place
        _bind(system)
        out[f"{system}_gflops"] = flops / _best_s(lambda: fused.matmul(a, b), MATMUL_REPEATS) / 1e9
        bound = bound_blas()
        out[f"{system}_blas"] = None if bound is None else bound.describe()
    src = np.ones(COPY_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    out["copy_gbps"] = 2 * COPY_BYTES / _best_s(lambda: np.copyto(dst, src), COPY_REPEATS) / 1e9
    torch = _torch() if with_torch else None
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch_gflops"] = flops / _best_s(lambda: ta @ tb, MATMUL_REPEATS) / 1e9
        out["torch"] = {
            "version": torch.__version__,
            "blas": "MKL" if torch.backends.mkl.is_available() else "other",
            "threads": torch.get_num_threads(),
        }
    out["blas"] = [
        {k: pool.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
        for pool in threadpool_info()
        if pool["user_api"] == "blas"
    ]
    out["kernel_isa"] = kernel_isa()
    out["numpy"] = np.__version__
    return out


def _ours(config: ModelConfig, params, tokens, targets, kernels: str):
    model = Transformer(config, params.copy(), kernels=kernels)
    adam = Adam(model.params.size, config.np_dtype, ADAM, kernels=kernels)

    def step() -> float:
        loss = model.forward(tokens, targets)
        model.backward()
        return loss

    return step, lambda: adam.step(model.params, model.grads)


def _theirs(config: ModelConfig, params, tokens, targets):
    torch = _torch()
    import torch.nn.functional as F

    from playground.training.ddp_model import build

    model = build(config, params)
    optimizer = torch.optim.Adam(model.parameters(), lr=ADAM.lr, betas=(ADAM.beta1, ADAM.beta2), eps=ADAM.eps)
    x, y = torch.from_numpy(tokens), torch.from_numpy(targets)

    def step() -> float:
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        return loss.item()

    return step, optimizer.step


def _repeats(fns: dict[str, Callable]) -> int:
    """Calls of each fn a round: as many as the slowest makes in ROUND_S (at least one)."""
    slowest = 0.0
    for name, fn in fns.items():
        _bind(name)
        t0 = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t0)
    return max(1, round(ROUND_S / max(slowest, 1e-6)))


def _rounds(fns: dict[str, Callable], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each fn, `repeats` calls a round, the order rotating round by round so
    that a machine getting busier or quieter favours none."""
    names = list(fns)
    out: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            _bind(name)
            t0 = time.perf_counter()
            for _ in range(repeats):
                fns[name]()
            out[name].append((time.perf_counter() - t0) / repeats)
    return out


def _block_products(config: ModelConfig, rows: int, systems: list[str]) -> dict[str, Callable]:
    """Per system, the twelve products of one block's four linear layers on `rows` tokens: forward
    (x W), and backward (x^T dy, dy W^T): numpy's matmul (numpy's BLAS), our native matmul (the
    bound BLAS), torch's."""
    d, rng = config.d_model, np.random.default_rng(SEED)
    arrays = [
        tuple(rng.standard_normal(shape).astype(config.dtype) for shape in ((rows, i), (i, o), (rows, o)))
        for i, o in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d))
    ]

    def products(mm: Callable, layers: list[tuple]) -> Callable:
        def run() -> None:
            for x, w, dy in layers:
                mm(x, w)
                mm(x.T, dy)
                mm(dy, w.T)

        return run

    fns = {"numpy": products(np.matmul, arrays), "native": products(fused.matmul, arrays)}
    if "mkl" in systems:
        fns["mkl"] = products(fused.matmul, arrays)
    if "torch" in systems:
        torch = _torch()
        fns["torch"] = products(torch.matmul, [tuple(torch.from_numpy(a) for a in t) for t in arrays])
    return fns


def shape(spec: dict) -> dict:
    """Forward + backward and the optimizer step of each system, alternating; the losses of the
    first step (they must agree: the same weights and batch); a profile of each of our kernel sets."""
    config = ModelConfig.from_dict(spec["config"])
    params = init_params(config, SEED)
    tokens, targets = BatchSampler(lecture_bytes(), config.context, spec["batch"], SEED).rank_batch(0)
    steps, optimizers, losses = {}, {}, {}
    for name in spec["systems"]:
        _bind(name)
        steps[name], optimizers[name] = (
            _theirs(config, params, tokens, targets)
            if name == "torch"
            else _ours(config, params, tokens, targets, _kernels(name))
        )
        losses[name] = steps[name]()  # the first step: a warm-up, and the loss to compare
        optimizers[name]()
    repeats = _repeats(steps)
    step_s = _rounds(steps, spec["rounds"], repeats)
    optimizer_s = _rounds(optimizers, spec["rounds"], _repeats(optimizers))
    products = _block_products(config, tokens.size, spec["systems"])
    products_s = _rounds(products, spec["rounds"], _repeats(products))
    profiles = {}
    for name in (s for s in spec["systems"] if s != "torch"):
        _bind(name)
        profiles[name] = profile_steps(
            config, params, tokens, targets, repeats, kernels=_kernels(name)
        ).to_dict()
    return {
        "repeats": repeats,
        "losses": losses,
        "step_s": step_s,
        "optimizer_s": optimizer_s,
        "products_s": products_s,
        "profiles": profiles,
        "num_params": config.num_params,
    }


def _kernels(system: str) -> str:
    """The model's kernel set of one of our systems (mkl: the native kernels on MKL's products)."""
    return "native" if system == "mkl" else system


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def main(argv: list[str] | None = None) -> None:
    spec = json.loads((argv or sys.argv[1:])[0])
    keep_freed_memory()
    pin_blas_threads(1)
    systems = spec["systems"]
    out = (
        machine(spec["dtype"], "torch" in systems, "mkl" in systems)
        if spec["what"] == "machine"
        else shape(spec)
    )
    out["openblas_env"] = {
        k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
