"""`python -m playground bench compute`: a training rank's compute, ours against PyTorch's, and where
our time goes.

For each scenario (train-modes and train-large by default) and rank count, the shapes one rank of
`run SCENARIO --ranks N` computes (its batch / N sequences): forward + backward of our model on its
native kernels (their products on numpy's OpenBLAS, and on MKL when the `mkl` extra is installed: the
BLAS torch's CPU build links), on its numpy reference and torch's model (training/ddp_model.py: the same model,
weights and batch), in alternating rounds; then each one's Adam step the same way; then a profile of
our step, kernel by kernel (transformer/profile.py): each piece's share, its achieved FLOP/s against
the machine's measured matrix-multiply rate and its bytes/s against the copy rate (a roofline).
Everything runs on one thread, as a training rank does (ranks share the cores: `pin_blas_threads(1)`,
torch.set_num_threads(1) in the DDP baseline).

Each measurement is a child process (compute_worker.py) started without OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE: some machines here set them for older OpenBLAS builds, which makes numpy's
OpenBLAS run a generic kernel instead of the one for its CPU; the page says whether they were set
and which kernel ran (threadpoolctl). The rest of the playground, its tests and CI run with the
environment as it is.

The page goes to stdout and `compute.md` (with `compute.json`: every round) in a run directory;
`python -m playground results --sections compute` writes it to docs/results/compute.md.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from rich.console import Console

from playground.commands.compute_render import render
from playground.config.scenario import load_scenario
from playground.core import flags
from playground.core.errors import ScenarioError
from playground.transformer.blas import mkl_installed

SCENARIOS = "train-modes,train-large"
RANKS = "1,2,4"
ROUNDS = 5
SYSTEMS = ("native", "mkl", "numpy", "torch")
OPENBLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
WORKER = [sys.executable, "-P", "-m", "playground.commands.compute_worker"]


def shapes(scenarios: str, rank_counts: list[int], overrides: list[str]) -> list[dict]:
    """One spec a (scenario, ranks): the model and one rank's batch; bad input is a ScenarioError."""
    out = []
    for name in [s for s in scenarios.split(",") if s]:
        params = load_scenario(name, overrides=overrides).params
        if not hasattr(params, "model_config"):
            raise ScenarioError(f"--scenarios {name}: not a training scenario (its node has no model)")
        for n in rank_counts:
            if n < 1 or params.batch % n:
                raise ScenarioError(
                    f"--rank-counts {n}: {name}'s batch of {params.batch} must split evenly over the ranks"
                )
            config = params.model_config
            out.append({"scenario": name, "ranks": n, "config": config.to_dict(), "batch": params.batch // n})
    return out


def child_env() -> dict[str, str]:
    """This environment without the variables that pin OpenBLAS to another kernel."""
    return {k: v for k, v in os.environ.items() if k not in OPENBLAS_ENV}


def measure(spec: dict, timeout_s: float = 3600) -> dict:
    """compute_worker's JSON for `spec`, run in a fresh process without OPENBLAS_ENV."""
    proc = subprocess.run(
        [*WORKER, json.dumps(spec)], env=child_env(), text=True, capture_output=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ScenarioError(
            f"bench compute: the measurement of {spec.get('scenario', 'the machine')} failed: {tail[0]}"
        )
    return json.loads(proc.stdout)


@dataclass(frozen=True)
class ComputeConfig:
    """`bench compute`: the training scenarios whose shapes run, at which rank counts, in how many
    alternating rounds, against which systems; checked before anything runs."""

    specs: tuple[dict, ...]
    rounds: int
    systems: tuple[str, ...]
    out: Path

    @classmethod
    def from_flags(
        cls,
        *,
        scenarios: flags.Text = SCENARIOS,
        rank_counts: flags.Text = RANKS,
        rounds: int = ROUNDS,
        systems: flags.Text | None = None,
        set: flags.Repeated | None = None,
        out: str | Path = "runs",
    ) -> "ComputeConfig":
        try:
            counts = [int(v) for v in flags.items(rank_counts)]
        except ValueError:
            raise ScenarioError(
                f"--rank-counts {flags.comma(rank_counts)!r}: a comma list of integers"
            ) from None
        rounds = flags.integer("bench compute", "--rounds", rounds)
        if rounds < 1:
            raise ScenarioError(f"--rounds: at least 1, got {rounds}")
        chosen = flags.items(systems) or SYSTEMS
        for s in chosen:
            if s not in SYSTEMS:
                raise ScenarioError(f"--systems {s!r}: compute's are {', '.join(SYSTEMS)}")
        if "native" not in chosen:
            raise ScenarioError("--systems: compute needs native (the profile and the ratios are of it)")
        specs = shapes(flags.comma(scenarios) or "", counts, list(flags.repeated(set)))
        return cls(tuple(specs), rounds, tuple(chosen), Path(out))


def run_compute(config: ComputeConfig) -> int:
    from playground.core.rundir import make_run_dir

    specs = list(config.specs)
    err = Console(stderr=True, highlight=False)
    systems = list(config.systems)
    if "torch" in systems and find_spec("torch") is None:
        err.print("torch is not installed (pip install torch==2.13.0): ours alone")
        systems.remove("torch")
    if "mkl" in systems and not mkl_installed():
        err.print(
            "the mkl package is not installed (pip install 'playground[mkl]'): no column of ours on MKL",
            markup=False,  # [mkl] is text, not a style
        )
        systems.remove("mkl")
    dtype = specs[0]["config"]["dtype"]
    err.print("bench compute: the machine's matrix-multiply and copy rates")
    machine = measure({"what": "machine", "dtype": dtype, "systems": systems})
    results = []
    for k, spec in enumerate(specs):
        err.print(
            f"[{k + 1}/{len(specs)}] {spec['scenario']} at {spec['ranks']} rank(s): "
            f"{spec['batch']} sequence(s) of {spec['config']['context']}, {', '.join(systems)}"
        )
        results.append(
            {**spec, **measure({"what": "shape", **spec, "rounds": config.rounds, "systems": systems})}
        )
    text = render(
        machine, results, systems, config.rounds, {k: os.environ[k] for k in OPENBLAS_ENV if k in os.environ}
    )
    print(text)
    run_dir = make_run_dir(config.out, "compute")
    (run_dir / "compute.md").write_text(text)
    (run_dir / "compute.json").write_text(json.dumps({"machine": machine, "shapes": results}))
    err.print(f"written: {run_dir / 'compute.md'}")
    return 0


def compute_section(ctx) -> str:
    """results' compute page (docs/results/compute.md): `bench compute` at its defaults (quick: 2
    ranks, one round), its page as it wrote it."""
    runs = ctx.work / "runs"
    args = ["bench", "compute", "--out", str(runs)]
    args += (
        ["--rank-counts", "2", "--rounds", "1"] if ctx.quick else ["--rounds", str(max(ROUNDS, ctx.rounds))]
    )
    ctx.run(*args, timeout_s=3600)
    return (ctx.latest(runs) / "compute.md").read_text()
