"""Where ZeRO-3 stops paying: its step against ZeRO-2's as the ranks and the model grow, with the
collectives from the simulator.

ZeRO-3 sends half as much again as ZeRO-2 (two all-gathers of every unit a step, not one) to keep
only 1/N of the parameters. Its gathers hide behind compute as long as gathering the next unit takes
less than computing this one; the unit's compute shrinks with the tokens a rank computes and its
gather does not, and the gather's latency grows with the ranks ((N - 1) alpha on a ring). So a fixed
per-rank batch (weak scaling, as FSDP is used) keeps the bandwidth term's ratio fixed and lets the
ranks' latency decide; a small model's short units stop hiding first.

For each model and rank count: each piece's compute from its FLOPs (a block's forward 24 d^2 + 2 T d
a token, the head's 2 d V, backward twice forward) at `flops_per_s` (default: this machine's
measured matrix-multiply rate on one thread); each unit's all-gather and reduce-scatter simulated
in virtual time (`playground.sim`, data-free) on N ranks in nodes of `ranks_per_node` over the
given links; both steps replayed on the compute and communication threads as the strategies run
them (`unit_steptime.unit_timeline`): ZeRO-3 with its gathers, ZeRO-2 without, then its all-gather
of everything after the update. ZeRO-3 "stops paying" where its step is more than `threshold`
longer than ZeRO-2's: what it saves in memory it then pays in time.

    python -m playground.training.zero_scaling --ranks 2..128 --link ethernet [--flops 50e9]
"""

import argparse
import json
import math
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from playground.models.costs import PRESETS, Link
from playground.sim.driver import simulate
from playground.sim.network import Machine
from playground.training.unit_steptime import unit_timeline
from playground.training.units import BACKWARD, FORWARD, UnitPlan
from playground.transformer import ModelConfig, ParamLayout, pin_blas_threads

MODELS: tuple[tuple[str, ModelConfig], ...] = (
    ("train-modes", ModelConfig(layers=2, d_model=64, heads=4, context=64)),
    ("train-large", ModelConfig(layers=8, d_model=512, heads=8, context=128)),
    ("GPT-2 small shape", ModelConfig(layers=12, d_model=768, heads=12, context=1024)),
    ("GPT-2 XL shape", ModelConfig(layers=48, d_model=1600, heads=25, context=1024)),
)
THRESHOLD = 0.10  # ZeRO-3 longer than ZeRO-2 by more than this: it stops paying
ITEMSIZE = 8  # float64, as the lab's runs


def measured_flops_per_s(size: int = 512, repeats: int = 5) -> float:
    """This machine's float64 matrix-multiply rate on one BLAS thread (the best of `repeats`)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    with pin_blas_threads(1):
        a @ b  # noqa: B018 - warm
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b  # noqa: B018 - timed
            best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def piece_flops(config: ModelConfig, plan: UnitPlan) -> dict[str, float]:
    """Each piece's FLOPs per token (module doc)."""
    d, t = config.d_model, config.context
    per = {"embedding": float(d), "head": 2.0 * d * config.vocab_size}
    forward = {p: per.get(p.partition(".")[2], 24.0 * d * d + 2.0 * t * d) for p in plan.pieces(FORWARD)}
    backward = {p: 2 * forward[f"{FORWARD}.{p.partition('.')[2]}"] for p in plan.pieces(BACKWARD)}
    return forward | backward


@dataclass(frozen=True)
class Network:
    """N ranks in nodes of `ranks_per_node`, `intra` inside a node and `inter` between nodes."""

    ranks_per_node: int
    intra: Link
    inter: Link

    def machine(self, num_ranks: int) -> Machine:
        per_node = min(self.ranks_per_node, num_ranks)
        return Machine(max(1, num_ranks // per_node), per_node, self.intra, self.inter)


def step_s(
    name: str,
    config: ModelConfig,
    num_ranks: int,
    tokens: int,
    flops_per_s: float,
    network: Network,
    prefetch: int,
) -> dict:
    """ZeRO-3's and ZeRO-2's step (their compute and communication only) of one model on N ranks."""
    plan = UnitPlan(ParamLayout.for_config(config), 1, num_ranks)
    compute = {p: f * tokens / flops_per_s for p, f in piece_flops(config, plan).items()}
    machine = network.machine(num_ranks)

    @cache
    def collective(kind: str, nbytes: int) -> float:
        row, _ = simulate(machine, kind, "ring", nbytes, dtype="float64", data=False)
        return row["time_us"] * 1e-6

    sizes = [u.size * ITEMSIZE for u in plan.units]
    gather = [collective("allgather", b) for b in sizes]
    scatter = [collective("reduce_scatter", b) for b in sizes]
    three = unit_timeline(plan, compute, gather, scatter, prefetch)
    two = unit_timeline(plan, compute, gather, scatter, prefetch, gathers=False)
    zero2 = two.end_s + sum(gather)
    work = sum(compute.values())
    return {
        "model": name,
        "params": config.num_params,
        "ranks": num_ranks,
        "tokens_per_rank": tokens,
        "compute_s": work,
        "zero2_s": zero2,
        "zero3_s": three.end_s,
        "zero3_exposed_s": three.end_s - work,
        "ratio": three.end_s / zero2,
        "pays": three.end_s <= (1 + THRESHOLD) * zero2,
    }


def study(
    ranks: list[int], tokens: int, flops_per_s: float, network: Network, prefetch: int = 1, models=MODELS
) -> list[dict]:
    return [
        step_s(name, config, n, tokens, flops_per_s, network, prefetch)
        for name, config in models
        for n in ranks
    ]


def stops_paying(rows: list[dict]) -> dict[str, int | None]:
    """model -> the fewest ranks at which ZeRO-3 no longer pays (None: it pays at every count)."""
    out: dict[str, int | None] = {}
    for r in rows:
        out.setdefault(r["model"], None)
        if not r["pays"] and out[r["model"]] is None:
            out[r["model"]] = r["ranks"]
    return out


def table_markdown(rows: list[dict]) -> str:
    """ZeRO-3's step over ZeRO-2's, a row per model and a column per rank count."""
    ranks = sorted({r["ranks"] for r in rows})
    lines = [
        "| model | parameters | " + " | ".join(f"{n} ranks" for n in ranks) + " | stops paying at |",
        "|---|---:|" + "---:|" * len(ranks) + "---|",
    ]
    where = stops_paying(rows)
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {r["ranks"]: r for r in rows if r["model"] == model}
        cells = [f"{mine[n]['ratio']:.2f}" + ("" if mine[n]["pays"] else " *") for n in ranks]
        at = where[model]
        lines.append(
            f"| {model} | {next(iter(mine.values()))['params']:,} | " + " | ".join(cells)
            + f" | {'beyond ' + str(ranks[-1]) if at is None else str(at) + ' ranks'} |"
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def parse_ranks(text: str) -> list[int]:
    """'2..128' (doubling) or '2,4,8'."""
    if ".." in text:
        lo, hi = (int(x) for x in text.split(".."))
        return [1 << k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2..128", help="doubling range 2..128 or a list 2,4,8")
    ap.add_argument(
        "--tokens", type=int, default=256, help="tokens a rank computes a step (train-large's 2 x 128)"
    )
    ap.add_argument("--flops", type=float, default=None, help="a rank's FLOP/s (default: measured here)")
    ap.add_argument("--link", default="ethernet", choices=sorted(PRESETS), help="link between nodes")
    ap.add_argument("--ranks-per-node", type=int, default=1, help="ranks per node (nvlink inside)")
    ap.add_argument("--prefetch", type=int, default=1)
    ap.add_argument(
        "--models", default=",".join(n for n, _ in MODELS), help="a comma list of the study's models"
    )
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    flops = args.flops or measured_flops_per_s()
    network = Network(args.ranks_per_node, PRESETS["nvlink"], PRESETS[args.link])
    models = tuple(m for m in MODELS if m[0] in args.models.split(","))
    rows = study(parse_ranks(args.ranks), args.tokens, flops, network, args.prefetch, models)
    print(
        f"ZeRO-3's step / ZeRO-2's, {args.tokens} tokens a rank, {flops / 1e9:.1f} GFLOP/s a rank, "
        f"{args.link} between nodes of {args.ranks_per_node} (* : more than {THRESHOLD:.0%} longer)\n"
    )
    print(table_markdown(rows))
    if args.out is not None:
        args.out.write_text(json.dumps({"flops_per_s": flops, "link": args.link, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
