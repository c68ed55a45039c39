"""A message's cost as a piecewise-linear function of its size: alpha_k + n beta_k per size range.

One alpha and one beta do not fit a real transport from 64 bytes to 64 MiB: a small message travels
inside its header, a large one through a shared-memory ring; a message that fits the cache is copied
faster than one that does not. SMPI (SimGrid's MPI) models this with a few size ranges, each with
its own latency and bandwidth factors, calibrated once per machine (Degomme et al., "Simulating MPI
applications: the SMPI approach", IEEE TPDS 2017). `fit_pieces` does that fit: given the range
boundaries (where the transport changes its path), a weighted least-squares line through the sizes
in each range, weighted by 1/T^2 (relative error, so the 64-byte point counts as much as the 64 MiB
one). On times that are exactly piecewise linear it recovers each range's line exactly.

A range needs two distinct sizes for a line; one with fewer is merged into the range below it (the
first range into the one above). A negative intercept is clipped to 0 and the slope refitted through
the origin; a negative slope (no size dependence measured) to 0 with the weighted mean as intercept.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError


@dataclass(frozen=True)
class Piece:
    """From `from_bytes` up to the next piece: T(n) = alpha_s + n * s_per_byte."""

    from_bytes: int
    alpha_s: float
    s_per_byte: float

    def time_s(self, n: float) -> float:
        return self.alpha_s + n * self.s_per_byte


def piece_for(pieces: Sequence[Piece], n: float) -> Piece:
    """The piece of an n-byte message: the last one starting at or below n."""
    k = 0
    while k + 1 < len(pieces) and pieces[k + 1].from_bytes <= n:
        k += 1
    return pieces[k]


def evaluate(pieces: Sequence[Piece], n: float) -> float:
    return piece_for(pieces, n).time_s(n)


def _line(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the weighted least-squares line through (x, y, weight) points, clipped
    as the module says."""
    weights = [w for _, _, w in points]
    xy = [(x, y) for x, y, _ in points]
    total = sum(weights)
    mean_x = sum(w * x for w, (x, _) in zip(weights, xy, strict=True)) / total
    mean_y = sum(w * y for w, (_, y) in zip(weights, xy, strict=True)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, (x, _) in zip(weights, xy, strict=True))
    sxy = sum(w * (x - mean_x) * (y - mean_y) for w, (x, y) in zip(weights, xy, strict=True))
    slope = sxy / sxx if sxx > 0 else 0.0
    intercept = mean_y - slope * mean_x
    if slope < 0:
        return max(0.0, mean_y), 0.0
    if intercept < 0:
        sxy0 = sum(w * x * y for w, (x, y) in zip(weights, xy, strict=True))
        sxx0 = sum(w * x * x for w, (x, _) in zip(weights, xy, strict=True))
        return 0.0, max(0.0, sxy0 / sxx0)
    return intercept, slope


def fit_pieces(
    sizes: Sequence[float],
    times: Sequence[float],
    bounds: Sequence[int] = (0,),
    scale: Sequence[float] | None = None,
) -> tuple[Piece, ...]:
    """Pieces starting at `bounds` (the first is 0) fitted to (size, time) points; see the module.
    Each point weighs 1/scale^2, scale being its time unless given (a part of a measured time is
    weighed by the whole measurement, so a part near 0 does not pin the line)."""
    if len(sizes) != len(times) or (scale is not None and len(scale) != len(times)):
        raise UsageError(f"got {len(sizes)} sizes but {len(times)} times")
    if len(set(sizes)) < 2:
        raise UsageError("need at least two distinct message sizes to fit a line")
    if any(not math.isfinite(t) or t < 0 for t in times):
        raise UsageError(f"times must be finite and >= 0, got {list(times)}")
    bounds = sorted(set(bounds) | {0})
    scale = times if scale is None else scale
    weighted = [
        (float(n), float(t), 1.0 / max(float(s), 1e-15) ** 2)
        for n, t, s in zip(sizes, times, scale, strict=True)
    ]
    groups: list[tuple[int, list[tuple[float, float, float]]]] = []
    for k, start in enumerate(bounds):
        end = bounds[k + 1] if k + 1 < len(bounds) else math.inf
        groups.append((start, [p for p in weighted if start <= p[0] < end]))
    merged: list[tuple[int, list[tuple[float, float, float]]]] = []
    for start, points in groups:
        if merged and len({p[0] for p in points}) < 2:
            merged[-1] = (merged[-1][0], merged[-1][1] + points)  # too few sizes: part of the range below
        elif merged and len({p[0] for p in merged[-1][1]}) < 2:
            merged[-1] = (merged[-1][0], merged[-1][1] + points)  # the first range had too few: join it
        else:
            merged.append((start, points))
    return tuple(Piece(int(start), *_line(points)) for start, points in merged)
