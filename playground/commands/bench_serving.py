"""`bench serving` and `bench speculative`: their flags and the configs the flags make.

Each benchmark's logic is its own module with a frozen config and one entry function
(serving/load/bench.py: `run_serving_bench`; serving/speculative_bench.py:
`run_speculative_bench`); this module only turns flags into those configs (`serving_config`,
`speculative_config`: the flags as keywords, with their defaults) and runs them.
"""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from playground.core import flags
from playground.core.errors import ParamError, ScenarioError

if TYPE_CHECKING:  # the serve extra's modules (httpx): imported when the command runs
    from playground.serving.load.bench import ServingBenchConfig
    from playground.serving.speculative_bench import SpeculativeBenchConfig

SERVE_EXTRA = "pip install -e '.[serve]'"
# --workload presets: the serve flags and the workload (the chunked-prefill comparison needs a
# context long enough for long prompts, so it serves random weights of that shape)
MIXED_SERVE = ["--model", "random", "--layers", "4", "--d-model", "256", "--heads", "8", "--context", "1024"]
_MODEL_HELP = "what to serve, as `serve --model` (default latest: the newest run train)"


def add_serving_flags(p: argparse.ArgumentParser) -> None:
    """`bench serving`'s flags; their defaults are `serving_config`'s."""
    p.add_argument("--model", help=_MODEL_HELP)
    p.add_argument("--rates", help="requests/s, a comma list (default auto: 0.25-8 x 1 / a request alone)")
    p.add_argument("--requests", type=int, help="requests a rate (default 50)")
    p.add_argument(
        "--setups",
        help="comma list of prefill-first, chunked, speculative (default prefill-first; "
        "--workload mixed: prefill-first,chunked)",
    )
    p.add_argument(
        "--workload",
        choices=["short", "mixed"],
        help="short prompts on the served model (the default), or mixed: 10%% prompts of 768 tokens "
        "among 32-token ones on a 4-layer random model of context 1024 (chunked prefill's case)",
    )
    p.add_argument("--prompt-tokens", type=int, help="prompt length (default 16; mixed: 32)")
    p.add_argument("--output-tokens", type=int, help="tokens generated a request (default 32; mixed: 64)")
    p.add_argument("--trace", help="a file of arrival times (s, one a line) instead of Poisson")
    p.add_argument("--slo-ttft", type=float, help="TTFT SLO in s (default 1)")
    p.add_argument("--slo-tpot", type=float, help="TPOT SLO in s (default 0.05)")
    p.add_argument("--slo-tbt", type=float, help="time-between-tokens SLO in s (default 0.1)")
    p.add_argument("--seed", type=int, help="the workload's seed (default 0)")
    p.add_argument("--out", help="directory for run directories, and where `latest` looks (default runs)")


def add_speculative_flags(p: argparse.ArgumentParser) -> None:
    """`bench speculative`'s flags; their defaults are `speculative_config`'s."""
    p.add_argument("--model", help=_MODEL_HELP)
    p.add_argument("--batch-sizes", help="batch sizes (default 1,4,16)")
    p.add_argument(
        "--workloads",
        help="prompts: fresh (a slice of the lecture), quoting (a passage, then its first words again); "
        "default fresh,quoting",
    )
    p.add_argument("--speculative-tokens", type=int, help="drafts a step (default 4)")
    p.add_argument("--output-tokens", type=int, help="tokens generated a request (default 48)")
    p.add_argument("--iters", "-i", type=int, help="rounds of each measurement (default 3)")
    p.add_argument("--seed", type=int, help="the workload's seed (default 0)")
    p.add_argument("--out", help="directory for run directories, and where `latest` looks (default runs)")


def _floats(text: str | None, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise ParamError(flag, f"a comma list of numbers, got {text!r}") from None


def serving_config(
    *,
    model: str = "latest",
    rates: flags.Text | None = None,
    requests: int = 50,
    setups: flags.Text | None = None,
    workload: str = "short",
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    trace: str | None = None,
    slo_ttft: float = 1.0,
    slo_tpot: float = 0.05,
    slo_tbt: float = 0.1,
    seed: int = 0,
    out: str | Path = "runs",
) -> "ServingBenchConfig":
    """The ServingBenchConfig of `bench serving`'s flags (bad values: a ParamError naming the flag);
    without the serve extra, one line saying how to install it."""
    try:
        from playground.serving.load.bench import ServingBenchConfig
    except ImportError as e:
        raise ScenarioError(
            f"bench serving needs the serve extra ({e.name} is missing): {SERVE_EXTRA}"
        ) from None
    from playground.serving.load.arrivals import Workload
    from playground.serving.load.load_stats import Slo

    flags.choice("bench serving", "--workload", workload, ("short", "mixed"))
    mixed = workload == "mixed"
    shape = Workload(
        prompt_tokens=prompt_tokens or (32 if mixed else 16),
        output_tokens=output_tokens or (64 if mixed else 32),
        long_prompt_tokens=768 if mixed else 0,
        long_share=0.1 if mixed else 0.0,
    )
    serve = MIXED_SERVE if mixed else ["--model", model, "--runs", str(out)]
    chosen = flags.comma(setups) or ("prefill-first,chunked" if mixed else "prefill-first")
    return ServingBenchConfig(
        serve_flags=(*serve, "--max-model-len", str(max(shape.longest_tokens, 64))),
        setups=tuple(chosen.split(",")),
        rates=_floats(flags.comma(rates), "--rates"),
        requests=requests,
        workload=shape,
        slo=Slo(slo_ttft, slo_tpot),
        slo_tbt_ms=1e3 * slo_tbt,
        trace=trace,
        seed=seed,
        out=str(out),
    )


def speculative_config(
    *,
    model: str = "latest",
    batch_sizes: flags.Text = "1,4,16",
    workloads: flags.Text = "fresh,quoting",
    speculative_tokens: int = 4,
    output_tokens: int = 48,
    iters: int = 3,
    seed: int = 0,
    out: str | Path = "runs",
) -> "SpeculativeBenchConfig":
    """The SpeculativeBenchConfig of `bench speculative`'s flags."""
    from playground.serving.speculative_bench import SpeculativeBenchConfig

    text = flags.comma(batch_sizes) or ""
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ParamError("--batch-sizes", f"a comma list of integers, got {text!r}") from None
    return SpeculativeBenchConfig(
        model=model,
        runs_dir=str(out),
        batch_sizes=sizes,
        workloads=tuple(flags.items(workloads)),
        num_speculative_tokens=speculative_tokens,
        output_tokens=output_tokens,
        rounds=iters,
        seed=seed,
        out=str(out),
    )


def run_serving(config: "ServingBenchConfig") -> int:
    from playground.core.errors import LabError
    from playground.serving.load.bench import run_serving_bench

    try:
        return run_serving_bench(config)
    except LabError as e:  # the server did not start or answer: one line, the run failed
        print(f"error: {e}", file=sys.stderr)
        return 1


def run_speculative(config: "SpeculativeBenchConfig") -> int:
    from playground.serving.speculative_bench import run_speculative_bench

    return run_speculative_bench(config)
