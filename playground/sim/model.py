"""The closed-form time beside each simulated row, and where the ring overtakes the others.

The formulas are the registry's (playground/collectives/registry.py). With a topology, an algorithm
made for nodes (`hier`) gets its two-link formula; any other algorithm is priced as if every link
were the slow one between nodes, an upper bound for algorithms that cross nodes at every step.
"""

from typing import Any

from playground.collectives import registry
from playground.collectives.bench_report import add_model_columns
from playground.models.contention import closed_form_applies
from playground.sim.options import SimSpec


def model_time_s(spec: SimSpec, algorithm: str, num_ranks: int, size_bytes: float) -> float | None:
    """The model's time for one row of `spec`, or None where there is no formula (auto)."""
    algo = registry.BY_KEY.get((spec.collective, algorithm))
    if algo is None:
        return None
    if algo.cost_on_nodes is not None:
        k = spec.ranks_per_node or num_ranks
        return algo.cost_on_nodes(size_bytes, num_ranks // k, k, spec.intra, spec.inter)
    return algo.cost(size_bytes, num_ranks, spec.inter)


def with_model(spec: SimSpec, row: dict, num_ranks: int) -> dict:
    """`row` with bench's model columns (`model_us`, `vs_model`, `model_pick`): bench's own function
    on a flat network; on a topology, this module's prices and pick. On a calibrated host whose
    cores the ranks outnumber there is no closed form (contention.closed_form_applies): empty."""
    if not closed_form_applies(num_ranks, spec.cores if spec.calibration is not None else None):
        return {**row, "model_us": None, "vs_model": None}
    if spec.ranks_per_node is None:
        return add_model_columns([row], spec.collective, num_ranks, spec.inter)[0]
    t = model_time_s(spec, row["algorithm"], num_ranks, row["size"])
    model_us = None if t is None else t * 1e6
    extra: dict[str, Any] = {
        "model_us": model_us,
        "vs_model": row["time_us"] / model_us if model_us else None,
    }
    if spec.collective == "allreduce":
        prices = {
            a: price
            for a in registry.names("allreduce", auto=False)
            if (price := model_time_s(spec, a, num_ranks, row["size"])) is not None
        }
        extra["model_pick"] = min(prices, key=prices.__getitem__)
    return {**row, **extra}


def affine(fn) -> tuple[float, float]:
    """(a, b) with fn(S) = a + b S: every formula is affine in S for a fixed rank count."""
    s = 1e9  # large sizes: the slope is then far above the rounding of the alpha terms
    t1, t2 = fn(s), fn(2 * s)
    b = (t2 - t1) / s
    return t1 - b * s, b


def crossover_bytes(spec, num_ranks: int, other: str, reference: str = "ring") -> float | None:
    """The size above which `reference` (the ring all-reduce; the pairwise all-to-all) is faster than
    `other` by the model: 0 if it always is, None if it never is."""
    a_ring, b_ring = affine(lambda s: model_time_s(spec, reference, num_ranks, s))
    a_other, b_other = affine(lambda s: model_time_s(spec, other, num_ranks, s))
    if a_ring <= a_other and b_ring <= b_other:
        return 0.0
    if b_other <= b_ring * (1 + 1e-9):  # the same bytes per rank (hd): the ring never catches up
        return None
    return (a_ring - a_other) / (b_other - b_ring)
