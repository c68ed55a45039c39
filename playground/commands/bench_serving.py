"""`bench serving` and `bench speculative`: their flags and the configs the flags make.

Each benchmark's logic is its own module with a frozen config and one entry function
(serving/load/bench.py: `run_serving_bench`; serving/speculative_bench.py:
`run_speculative_bench`); this module only turns flags into those configs.
"""

import argparse
import sys

from playground.core.errors import ParamError, ScenarioError

SERVE_EXTRA = "pip install -e '.[serve]'"
# --workload presets: the serve flags and the workload (the chunked-prefill comparison needs a
# context long enough for long prompts, so it serves random weights of that shape)
MIXED_SERVE = ["--model", "random", "--layers", "4", "--d-model", "256", "--heads", "8", "--context", "1024"]


def add_serving_arguments(b) -> None:
    g = b.add_argument_group("serving, speculative (an HTTP server under load; speculative decoding)")
    g.add_argument(
        "--model",
        default="latest",
        help="serving, speculative: what to serve, as `serve --model` (default latest: the newest run train)",
    )
    g.add_argument(
        "--rates", help="serving: requests/s, a comma list (default auto: 0.25-8 x 1 / a request alone)"
    )
    g.add_argument("--requests", type=int, default=50, help="serving: requests a rate (default 50)")
    g.add_argument(
        "--setups",
        default=None,
        help="serving: comma list of prefill-first, chunked, speculative (default prefill-first; "
        "--workload mixed: prefill-first,chunked)",
    )
    g.add_argument(
        "--workload",
        choices=["short", "mixed"],
        default="short",
        help="serving: short prompts on the served model, or mixed: 10%% prompts of 768 tokens among "
        "32-token ones on a 4-layer random model of context 1024 (chunked prefill's case)",
    )
    g.add_argument("--prompt-tokens", type=int, help="serving: prompt length (default 16; mixed: 32)")
    g.add_argument(
        "--output-tokens", type=int, help="serving: tokens generated a request (default 32; mixed: 64)"
    )
    g.add_argument("--trace", help="serving: a file of arrival times (s, one a line) instead of Poisson")
    g.add_argument("--slo-ttft", type=float, default=1.0, help="serving: TTFT SLO in s (default 1)")
    g.add_argument("--slo-tpot", type=float, default=0.05, help="serving: TPOT SLO in s (default 0.05)")
    g.add_argument(
        "--slo-tbt", type=float, default=0.1, help="serving: time-between-tokens SLO in s (default 0.1)"
    )
    g.add_argument("--batch-sizes", default="1,4,16", help="speculative: batch sizes (default 1,4,16)")
    g.add_argument("--speculative-tokens", type=int, default=4, help="speculative: drafts a step (default 4)")
    g.add_argument("--seed", type=int, default=0, help="serving, speculative: the workload's seed")


def _floats(text: str | None, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise ParamError(flag, f"a comma list of numbers, got {text!r}") from None


def serving_config(args: argparse.Namespace):
    from playground.serving.load.arrivals import Workload
    from playground.serving.load.bench import ServingBenchConfig
    from playground.serving.load.load_stats import Slo

    mixed = args.workload == "mixed"
    workload = Workload(
        prompt_tokens=args.prompt_tokens or (32 if mixed else 16),
        output_tokens=args.output_tokens or (64 if mixed else 32),
        long_prompt_tokens=768 if mixed else 0,
        long_share=0.1 if mixed else 0.0,
    )
    serve = MIXED_SERVE if mixed else ["--model", args.model, "--runs", args.out]
    setups = args.setups or ("prefill-first,chunked" if mixed else "prefill-first")
    return ServingBenchConfig(
        serve_flags=(*serve, "--max-model-len", str(max(workload.longest_tokens, 64))),
        setups=tuple(setups.split(",")),
        rates=_floats(args.rates, "--rates"),
        requests=args.requests,
        workload=workload,
        slo=Slo(args.slo_ttft, args.slo_tpot),
        slo_tbt_ms=1e3 * args.slo_tbt,
        trace=args.trace,
        seed=args.seed,
        out=args.out,
    )


def run_serving(args: argparse.Namespace) -> int:
    try:
        from playground.serving.load.bench import run_serving_bench
    except ImportError as e:
        raise ScenarioError(
            f"bench serving needs the serve extra ({e.name} is missing): {SERVE_EXTRA}"
        ) from None
    from playground.core.errors import LabError

    try:
        return run_serving_bench(serving_config(args))
    except LabError as e:  # the server did not start or answer: one line, the run failed
        print(f"error: {e}", file=sys.stderr)
        return 1


def run_speculative(args: argparse.Namespace) -> int:
    from playground.serving.speculative_bench import SpeculativeBenchConfig, run_speculative_bench

    try:
        sizes = tuple(int(x) for x in args.batch_sizes.split(","))
    except ValueError:
        raise ParamError("--batch-sizes", f"a comma list of integers, got {args.batch_sizes!r}") from None
    config = SpeculativeBenchConfig(
        model=args.model,
        runs_dir=args.out,
        batch_sizes=sizes,
        num_speculative_tokens=args.speculative_tokens,
        output_tokens=args.output_tokens or 48,
        rounds=args.iters or 3,
        seed=args.seed,
        out=args.out,
    )
    return run_speculative_bench(config)
