"""The alpha-beta (latency-bandwidth) cost model of messages, and the fit that measures it.

A message of n bytes takes T(n) = alpha + n / beta: alpha is the fixed cost of any message
(software stack, synchronisation, a round trip), beta the bandwidth in bytes per second. The
effective bandwidth n / T(n) reaches half of beta at n = alpha * beta, which is why many small
messages waste a link and why gradients are packed into buckets (lecture P4, sections 5.1-5.3).

`AlphaBeta` is the two-parameter link the bucket experiments fit at the start of a run; its
all-reduce times come from `playground.models.costs`, which holds every collective's formula
(with a reduction term gamma, free here). A schedule (one all-reduce per bucket, run back to back)
costs the sum of its all-reduces. The model ignores copies and contention: it is the yardstick
that measured times are printed beside, not a promise.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from playground.core.errors import UsageError
from playground.models.costs import Link, allreduce_ring_time_s, allreduce_tree_time_s

# What the bucket experiments run (their own choice, not the list of algorithms: that is
# playground/collectives/registry.py); costs.py has every formula.
ALLREDUCE_TIME_S = {"ring": allreduce_ring_time_s, "tree": allreduce_tree_time_s}
ALGORITHMS = tuple(ALLREDUCE_TIME_S)


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted or assumed link: `alpha_s` per message, `beta_bytes_per_s` bandwidth."""

    alpha_s: float
    beta_bytes_per_s: float

    def __post_init__(self):
        if self.alpha_s < 0:
            raise UsageError(f"must be >= 0, got {self.alpha_s}", field="alpha_s")
        if not self.beta_bytes_per_s > 0:
            raise UsageError(f"must be > 0, got {self.beta_bytes_per_s}", field="beta_bytes_per_s")

    @property
    def half_bandwidth_bytes(self) -> float:
        """n_1/2 = alpha * beta: the message size that reaches half the peak bandwidth."""
        return self.alpha_s * self.beta_bytes_per_s

    def message_time_s(self, num_bytes: float) -> float:
        """One point-to-point message."""
        return self.alpha_s + num_bytes / self.beta_bytes_per_s

    def sends_time_s(self, sizes_bytes: Iterable[float]) -> float:
        """Messages sent one after another (the lecture's section 5.3 count)."""
        return sum(self.message_time_s(n) for n in sizes_bytes)

    def allreduce_time_s(self, num_bytes: float, num_ranks: int, algorithm: str = "ring") -> float:
        """One all-reduce of `num_bytes` (each rank's array) over `num_ranks` ranks."""
        if algorithm not in ALGORITHMS:
            raise UsageError(f"expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}", field="algorithm")
        return ALLREDUCE_TIME_S[algorithm](num_bytes, num_ranks, Link(self.alpha_s, self.beta_bytes_per_s))

    def schedule_time_s(
        self, bucket_sizes_bytes: Iterable[float], num_ranks: int, algorithm: str = "ring"
    ) -> float:
        """All-reduces of the buckets run back to back: the sum of their times."""
        return sum(self.allreduce_time_s(n, num_ranks, algorithm) for n in bucket_sizes_bytes)


def allreduce_messages_per_rank(num_ranks: int, algorithm: str = "ring") -> int:
    """Messages each rank sends in one all-reduce, by the model (a chunked ring may send more)."""
    if num_ranks <= 1:
        return 0
    if algorithm == "ring":
        return 2 * (num_ranks - 1)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(num_ranks))
    raise UsageError(f"expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}", field="algorithm")


LARGE_SIZES_SPAN = 16  # beta comes from the sizes within this factor of the largest


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> AlphaBeta:
    """Fit T(n) = alpha + n / beta to one-way message times: beta from the large messages, alpha
    from the small ones, as LogGP separates its gap per byte G from its latency and OSU measures
    bandwidth and latency apart.

    beta is 1 / the slope of the least-squares line through the sizes within a factor 16 of the
    largest (at least the two largest): the rate large messages really move at. One line through
    8 B .. 4 MiB is not that rate where the time is not one line: on a shaped link a message that
    fits tbf's bucket leaves at veth speed, and a fit weighted by 1/T^2 (relative error, which the
    small messages dominate) took their slope for the link's, beta 0.020 GB/s on a 100mbit link
    that streams 0.012 GB/s, and its model was 38% short of a 1 MiB message.

    alpha is then the 1/T^2-weighted mean of T(n) - n / beta over the latency-bound sizes (byte
    term at most half the time), so the model meets the small messages; with none (every size
    large), the large sizes' intercept. On times that are one line both give its alpha and beta.
    Needs two distinct sizes. A negative alpha is clipped to 0; a non-positive slope (no
    measurable size dependence) raises UsageError: a bad measurement is an error, not a silly model.
    """
    if len(sizes_bytes) != len(times_s):
        raise UsageError(f"got {len(sizes_bytes)} sizes but {len(times_s)} times")
    distinct = sorted(set(sizes_bytes))
    if len(distinct) < 2:
        raise UsageError("need at least two distinct message sizes to fit alpha and beta")
    if min(times_s) <= 0:
        raise UsageError("message times must be > 0")
    smallest_large = min(distinct[-1] / LARGE_SIZES_SPAN, distinct[-2])
    large = [(n, t) for n, t in zip(sizes_bytes, times_s, strict=True) if n >= smallest_large]
    slope, intercept = _least_squares([n for n, _ in large], [t for _, t in large])
    if slope <= 0:
        raise UsageError(f"message time does not grow with size (slope {slope:.3g} s/B): cannot fit beta")
    latency_bound = [(n, t) for n, t in zip(sizes_bytes, times_s, strict=True) if n * slope <= t / 2]
    if latency_bound:
        weights = [1.0 / (t * t) for _, t in latency_bound]
        residuals = [t - n * slope for n, t in latency_bound]
        intercept = sum(w * r for w, r in zip(weights, residuals, strict=True)) / sum(weights)
    return AlphaBeta(alpha_s=max(0.0, intercept), beta_bytes_per_s=1.0 / slope)


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the ordinary least-squares line; xs has two distinct values or more."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, mean_y - slope * mean_x


def ring_tree_crossover_bytes(link: AlphaBeta, num_ranks: int) -> float:
    """All-reduce size above which the ring is faster than the tree (lecture section 5.4).

    ring(S) = tree(S) with L = ceil(log2 N) solves to S* = alpha beta (N - 1 - L) / (L - (N - 1) / N):
    the tree saves 2(N - 1 - L) alphas, the ring moves 2(L - (N - 1)/N) S / beta fewer bytes. At
    2 or 3 ranks (N - 1 = L) the ring is never slower: 0.
    """
    if num_ranks < 2:
        raise UsageError(
            f"need >= 2 ranks for an all-reduce to cost anything, got {num_ranks}", field="num_ranks"
        )
    levels = math.ceil(math.log2(num_ranks))
    saved_alphas = num_ranks - 1 - levels
    return link.alpha_s * link.beta_bytes_per_s * saved_alphas / (levels - (num_ranks - 1) / num_ranks)
