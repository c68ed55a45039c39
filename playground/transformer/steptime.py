"""Time one process's training step, phase by phase: `python -m playground.transformer.steptime`.

    taskset -c 0 python -m playground.transformer.steptime --layers 8 --d-model 512 --heads 8 \\
        --context 128 --batch 4 --repeats 5

Pins the BLAS to one thread and keeps freed memory (as a training rank does; `--blas-threads 0`
and `--default-malloc` leave either as it is, for an A/B; `--kernels numpy` runs the numpy
reference instead of the native kernels), runs one warm-up step, then `repeats`
steps on the lecture's batches, and prints the median and the min-max of forward, backward and
Adam in milliseconds, the model's size, and the CPU time and page faults per step. On a shared
machine take the figures from alternating runs or a quiet machine: this is wall-clock time.
"""

import resource
import statistics
import time

from playground.core.argparser import OneLineParser
from playground.core.machine import keep_freed_memory
from playground.transformer.blas import blas_threads, pin_blas_threads
from playground.transformer.config import ModelConfig
from playground.transformer.data import BatchSampler, lecture_bytes
from playground.transformer.kernels import KERNELS, default_kernels
from playground.transformer.model import Transformer
from playground.transformer.optim import Adam


def time_steps(
    config: ModelConfig, batch: int, repeats: int, kernels: str | None = None
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds of each phase of `repeats` steps after one warm-up step, and the CPU seconds
    (user, system) and minor page faults per step of those steps."""
    model = Transformer(config, seed=0, kernels=kernels)
    adam = Adam(model.params.size, config.np_dtype, kernels=kernels)
    sampler = BatchSampler(lecture_bytes(), config.context, batch)
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "adam": []}
    for step in range(repeats + 1):
        inputs, targets = sampler.rank_batch(step)
        t0 = time.perf_counter()
        model.forward(inputs, targets)
        t1 = time.perf_counter()
        model.backward()
        t2 = time.perf_counter()
        adam.step(model.params, model.grads)
        t3 = time.perf_counter()
        if step:
            for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                phases[name].append(seconds)
        else:
            before = resource.getrusage(resource.RUSAGE_SELF)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {
        name: (getattr(after, field) - getattr(before, field)) / repeats
        for name, field in (("user", "ru_utime"), ("system", "ru_stime"), ("faults", "ru_minflt"))
    }
    return phases, cpu


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(
        prog="python -m playground.transformer.steptime", description=__doc__.split("\n")[0]
    )
    defaults = ModelConfig()
    for name in ("layers", "d_model", "heads", "context"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    parser.add_argument("--dtype", default=defaults.dtype)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--blas-threads", type=int, default=1, help="0: leave the BLAS as it is")
    parser.add_argument("--default-malloc", action="store_true", help="do not keep freed memory (an A/B)")
    parser.add_argument(
        "--kernels", choices=list(KERNELS), default=None, help="the kernel set (default native)"
    )
    args = parser.parse_args(argv)
    config = ModelConfig(
        layers=args.layers, d_model=args.d_model, heads=args.heads, context=args.context, dtype=args.dtype
    )
    if args.blas_threads:
        pin_blas_threads(args.blas_threads)
    if not args.default_malloc:
        keep_freed_memory()
    phases, cpu = time_steps(config, args.batch, args.repeats, args.kernels)
    print(
        f"{config.num_params:,} parameters ({config.param_bytes / 2**20:.1f} MiB of {config.dtype} gradients), "
        f"batch {args.batch} x context {config.context}, {args.repeats} steps, "
        f"BLAS threads {blas_threads()}, {'default malloc' if args.default_malloc else 'freed memory kept'}, "
        f"{(args.kernels or default_kernels())} kernels"
    )
    print(
        f"  cpu/step  user {cpu['user'] * 1e3:.1f} ms, system {cpu['system'] * 1e3:.1f} ms, "
        f"page faults {cpu['faults']:,.0f}"
    )
    total = [sum(step) for step in zip(*phases.values(), strict=True)]
    for name, seconds in (*phases.items(), ("step", total)):
        ms = [s * 1e3 for s in seconds]
        print(f"  {name:9s} median {statistics.median(ms):9.1f} ms   min-max {min(ms):.1f}-{max(ms):.1f}")


if __name__ == "__main__":
    main()
