"""Queueing models beside the real queue, batching and Little experiments (lecture section 2.1-2.4).

Words: S = mean service time, lambda = arrival rate, rho = lambda * S (load, utilisation),
sojourn = time in system (waiting + service), the "latency" a client measures.

- M/M/1 (Poisson arrivals, exponential service, one server, FIFO): the sojourn time is
  exponential with rate mu - lambda, so the mean is S / (1 - rho) and the q-quantile is
  -ln(1 - q) * S / (1 - rho). At rho = 0.9, S = 10 ms: mean 100 ms; p99 at 0.95: 921 ms.
- M/D/1 (fixed service): Pollaczek-Khinchine gives the mean wait rho S / (2 (1 - rho)), half of
  M/M/1's; its full waiting-time distribution is Erlang's (1909) finite sum, evaluated here in
  high-precision decimals because its terms alternate in sign and grow like e^(lambda t), and past
  50 services by the exponential tail it tends to (what a p99 near saturation needs).
- M/G/1 in general: Wq = rho S (1 + cs^2) / (2 (1 - rho)), cs = coefficient of variation of S.
- Little: L = lambda W in any stable system (and exactly over a window that starts and ends empty).
- Batching server: a batch of b costs fixed + per_item * b; with batches capped at max_batch the
  capacity is max_batch / (fixed + per_item * max_batch) (lecture: 20 ms + 1 ms x b, cap 32:
  615/s, against 1 / 21 ms = 48/s one at a time).

The replay functions (`fifo_departures`, `batch_departures`) run the ideal server on exactly the
arrivals and service times a real run used: the gap between replay and measurement is the
system's overhead, the gap between replay and formula is sampling noise.
"""

import functools
import math
from decimal import Decimal, localcontext

import numpy as np

from playground.core.errors import UsageError


def _check_load(rho: float) -> None:
    if not 0 <= rho < 1:
        raise UsageError(f"load rho must be in [0, 1), got {rho}")


def mm1_mean_sojourn_s(service_s: float, rho: float) -> float:
    """Mean time in an M/M/1 system, S / (1 - rho): why latency explodes as load nears 100%."""
    _check_load(rho)
    return service_s / (1.0 - rho)


def mm1_sojourn_quantile_s(service_s: float, rho: float, q: float) -> float:
    """q-quantile of M/M/1 sojourn time: it is exponential with mean S / (1 - rho)."""
    _check_load(rho)
    return -math.log(1.0 - q) * service_s / (1.0 - rho)


def mg1_mean_wait_s(service_s: float, rho: float, service_cv2: float) -> float:
    """Pollaczek-Khinchine mean queueing delay (excluding service) for M/G/1."""
    _check_load(rho)
    return rho * service_s * (1.0 + service_cv2) / (2.0 * (1.0 - rho))


def md1_mean_sojourn_s(service_s: float, rho: float) -> float:
    """Mean time in an M/D/1 system: S + rho S / (2 (1 - rho)); the wait is half of M/M/1's."""
    return service_s + mg1_mean_wait_s(service_s, rho, 0.0)


ERLANG_TERMS = 50  # beyond this many services of wait, the exponential tail (exact to 1e-12 there)


@functools.lru_cache(maxsize=64)  # a p99's bisection asks for it at every step, for one rho
def md1_tail_decay(rho: float) -> tuple[float, float]:
    """(y, C): the M/D/1 wait's tail P(wait > t) -> C exp(-y t / D) as t grows, where y > 0 solves
    rho (e^y - 1) = y (lambda (E[e^(theta S)] - 1) = theta for a fixed S = D, theta = y / D) and
    C = (1 - rho) / (rho e^y - 1) (Cramer-Lundberg for M/G/1's wait). Near saturation y -> 2 (1 - rho)
    and C -> 1: the tail of mean rho D / (2 (1 - rho)), Pollaczek-Khinchine's."""
    _check_load(rho)
    lo, hi = 0.0, 1.0
    while rho * math.expm1(hi) <= hi:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if rho * math.expm1(mid) > mid:
            hi = mid
        else:
            lo = mid
    y = (lo + hi) / 2
    return y, (1 - rho) / (rho * math.exp(y) - 1)


def md1_wait_cdf(t_s: float, service_s: float, rho: float) -> float:
    """P(wait <= t) in M/D/1, Erlang's formula:
    (1 - rho) * sum_{k=0}^{floor(t/D)} (lambda (kD - t))^k / k! * exp(-lambda (kD - t));
    past `ERLANG_TERMS` services its exponential tail (`md1_tail_decay`): Erlang's sum there needs
    hundreds of digits and terms, minutes near saturation.
    """
    _check_load(rho)
    if t_s < 0:
        return 0.0
    if rho == 0:
        return 1.0
    if t_s > ERLANG_TERMS * service_s:
        y, c = md1_tail_decay(rho)
        return min(1.0, max(0.0, 1.0 - c * math.exp(-y * t_s / service_s)))
    lam = Decimal(rho) / Decimal(service_s)
    d, t = Decimal(service_s), Decimal(t_s)
    with localcontext() as ctx:
        ctx.prec = 40 + int(float(lam * t) * 0.45)  # the terms reach e^(lambda t); keep digits to spare
        total = Decimal(0)
        fact = Decimal(1)
        for k in range(int(t_s // service_s) + 1):
            if k:
                fact *= k
            x = lam * (k * d - t)  # <= 0
            total += (x**k if k else Decimal(1)) / fact * (-x).exp()
        return min(1.0, max(0.0, float((1 - Decimal(rho)) * total)))


def md1_sojourn_quantile_s(service_s: float, rho: float, q: float) -> float:
    """q-quantile of M/D/1 sojourn time (wait quantile + D), by bisection on Erlang's CDF."""
    _check_load(rho)
    if md1_wait_cdf(0.0, service_s, rho) >= q:
        return service_s
    lo, hi = 0.0, max(service_s, 2 * mm1_sojourn_quantile_s(service_s, rho, q))
    for _ in range(50):
        mid = (lo + hi) / 2
        if md1_wait_cdf(mid, service_s, rho) >= q:
            hi = mid
        else:
            lo = mid
        if hi - lo < service_s * 1e-4:
            break
    return hi + service_s


def little_number_in_system(arrival_rate_per_s: float, mean_sojourn_s: float) -> float:
    """Little's law L = lambda W: e.g. 50 req/s x 2 s = 100 requests in flight (lecture 2.1)."""
    return arrival_rate_per_s * mean_sojourn_s


def time_average_in_system(
    arrivals_s: np.ndarray, departures_s: np.ndarray, t0_s: float, t1_s: float
) -> float:
    """Time average of N(t) = #{arrived <= t < departed} over [t0, t1], from timestamps.

    Each request contributes the part of [arrival, departure) inside the window. Over a window
    that starts and ends with the system empty this equals lambda W exactly (Little as an
    identity), so the experiment measures over the *arrival* window, where requests still in
    flight at the end make the check a real one.
    """
    if t1_s <= t0_s:
        raise UsageError(f"empty window [{t0_s}, {t1_s}]")
    a = np.clip(np.asarray(arrivals_s, float), t0_s, t1_s)
    d = np.clip(np.asarray(departures_s, float), t0_s, t1_s)
    return float(np.sum(d - a) / (t1_s - t0_s))


def fifo_departures(arrivals_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Departure times of an ideal FIFO single server (Lindley): d_i = max(a_i, d_{i-1}) + s_i."""
    out = np.empty(len(arrivals_s))
    free_at = -math.inf
    for i, (a, s) in enumerate(zip(arrivals_s, service_s, strict=True)):
        free_at = max(a, free_at) + s
        out[i] = free_at
    return out


def batch_service_s(batch_size: int, fixed_s: float, per_item_s: float) -> float:
    """Cost of one batch: a fixed part (e.g. reading all weights) plus a little per request."""
    return fixed_s + per_item_s * batch_size


def batch_capacity_per_s(fixed_s: float, per_item_s: float, max_batch: int) -> float:
    """Most requests per second a batching server can finish: full batches back to back."""
    return max_batch / batch_service_s(max_batch, fixed_s, per_item_s)


def batch_steady_size(arrival_rate_per_s: float, fixed_s: float, per_item_s: float, max_batch: int) -> float:
    """Fluid estimate of the batch size under load: b = lambda (fixed + per_item b), capped.

    A batch collects what arrived while the previous one ran, so b = lambda * cost(b); it solves
    to lambda fixed / (1 - lambda per_item) and is at least 1 (the request that starts a batch).
    """
    if arrival_rate_per_s * per_item_s >= 1:
        return float(max_batch)
    b = arrival_rate_per_s * fixed_s / (1 - arrival_rate_per_s * per_item_s)
    return float(min(max_batch, max(1.0, b)))


def batch_departures(arrivals_s: np.ndarray, fixed_s: float, per_item_s: float, max_batch: int) -> np.ndarray:
    """Departure times of an ideal batching server that, when free, takes everything queued
    (up to max_batch) as one batch; all items of a batch leave together when it ends."""
    arrivals = np.asarray(arrivals_s, float)
    out = np.empty(len(arrivals))
    i, free_at = 0, -math.inf
    while i < len(arrivals):
        start = max(free_at, arrivals[i])
        j = int(np.searchsorted(arrivals, start, side="right"))  # everything that arrived by `start`
        j = min(max(j, i + 1), i + max_batch)
        free_at = start + batch_service_s(j - i, fixed_s, per_item_s)
        out[i:j] = free_at
        i = j
    return out


def batched_sojourn_s(
    arrival_rate_per_s: float, alone_s: float, decode_steps: int, per_seq_step_s: float
) -> float:
    """Mean time in a continuously batching server (an LLM engine), fluid model.

    A request alone takes `alone_s`; each of its `decode_steps` steps costs `per_seq_step_s` more
    for every other sequence in the batch. By Little the batch holds b = lambda W, so
    W = alone + steps c lambda W, i.e. W = alone / (1 - rho) with rho = lambda steps c: the lecture's
    1 / (1 - rho), where a request's cost to the server is steps x c (what it adds to the others'
    steps) instead of its whole time alone. Infinite at rho >= 1 (the queue grows without bound).
    """
    rho = arrival_rate_per_s * decode_steps * per_seq_step_s
    return alone_s / (1.0 - rho) if rho < 1 else math.inf


def batched_capacity_per_s(decode_steps: int, per_seq_step_s: float) -> float:
    """The arrival rate at which `batched_sojourn_s` diverges: 1 / (steps x c)."""
    return 1.0 / (decode_steps * per_seq_step_s) if per_seq_step_s > 0 else math.inf
