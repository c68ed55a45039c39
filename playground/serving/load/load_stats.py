"""A sweep's figures: per request rate the throughput, the latencies' percentiles, goodput under
an SLO, and the queueing models fed by what was measured.

- goodput: requests a second that finished within the SLO (TTFT <= slo_ttft_s and TPOT <= slo_tpot_s),
  as vLLM's benchmark counts it; below the offered rate once the server cannot keep up.
- the knee: the first rate whose p99 end-to-end latency is more than twice the lowest rate's.
- one at a time (M/D/1): the server as a FIFO queue serving a request in `alone_s`, the lowest
  rate's median end-to-end time: load rho = lambda x alone, p99 from Erlang's formula
  (models/queueing.py). Its knee: where that p99 reaches twice `alone_s`.
- batched (models/queueing.py's `batched_sojourn_s`): a decode step costs a + c x batch; c is
  fitted over the rates from the measured TPOT against the mean number of requests in flight
  (Little: L = lambda W); rho = lambda x steps x c, mean E2E = alone / (1 - rho); its knee (mean
  twice alone) at rho = 1/2. Batching moves the knee by roughly alone / (steps x c).
"""

import math
from dataclasses import dataclass

import numpy as np

from playground.models.queueing import batched_capacity_per_s, batched_sojourn_s, md1_sojourn_quantile_s
from playground.serving.load.client import RequestRecord

KNEE_FACTOR = 2.0  # the knee: p99 E2E more than this times the lowest rate's


@dataclass(frozen=True)
class Slo:
    ttft_s: float = 1.0
    tpot_s: float = 0.05

    def met(self, r: RequestRecord) -> bool:
        tpot = r.tpot_s
        return (
            r.ok
            and r.ttft_s is not None
            and r.ttft_s <= self.ttft_s
            and (tpot is None or tpot <= self.tpot_s)
        )


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def rate_row(setup: str, rate: float, records: list[RequestRecord], slo: Slo) -> dict:
    """One rate's figures (times in ms, rates per second)."""
    ok = [r for r in records if r.ok]
    start = min(r.sent_s for r in records)
    end = max((r.sent_s + (r.e2e_s or 0.0)) for r in records)
    window = max(end - start, 1e-9)
    ms = lambda v: None if v is None else 1e3 * v  # noqa: E731
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [t for r in ok if (t := r.tpot_s) is not None]
    itl = [g for r in ok for g in r.itl_s]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    return {
        "setup": setup,
        "rate": rate,
        "requests": len(records),
        "failed": len(records) - len(ok),
        "req_s": len(ok) / window,
        "tok_s": sum(r.output_tokens for r in ok) / window,
        "in_flight": sum(e2e) / window,  # Little: the mean number of requests in the server
        "ttft_p50_ms": ms(pct(ttft, 50)),
        "ttft_p90_ms": ms(pct(ttft, 90)),
        "ttft_p99_ms": ms(pct(ttft, 99)),
        "tpot_p50_ms": ms(pct(tpot, 50)),
        "tpot_p90_ms": ms(pct(tpot, 90)),
        "tpot_p99_ms": ms(pct(tpot, 99)),
        "itl_p99_ms": ms(pct(itl, 99)),
        "e2e_p50_ms": ms(pct(e2e, 50)),
        "e2e_p90_ms": ms(pct(e2e, 90)),
        "e2e_p99_ms": ms(pct(e2e, 99)),
        "goodput_req_s": sum(1 for r in records if slo.met(r)) / window,
        "slo_met": sum(1 for r in records if slo.met(r)) / len(records),
        "tpot_mean_s": float(np.mean(tpot)) if tpot else None,
    }


def knee(rows: list[dict]) -> float | None:
    """The first rate whose p99 E2E is more than KNEE_FACTOR x the lowest rate's (None: none is)."""
    base = rows[0]["e2e_p99_ms"] if rows else None
    for row in rows:
        if row["failed"] or (base and row["e2e_p99_ms"] and row["e2e_p99_ms"] > KNEE_FACTOR * base):
            return row["rate"]
    return None


@dataclass(frozen=True)
class QueueModel:
    """The two models of the module doc, fed by one sweep."""

    alone_s: float  # a request alone: the lowest rate's median E2E
    decode_steps: int  # output tokens - 1
    per_seq_step_s: float  # c: what one more sequence in the batch adds to a step

    def md1_p99_s(self, rate: float) -> float:
        rho = rate * self.alone_s
        return md1_sojourn_quantile_s(self.alone_s, rho, 0.99) if rho < 1 else math.inf

    def md1_knee(self) -> float:
        """The rate where M/D/1's p99 reaches KNEE_FACTOR x alone (bisection on rho)."""
        lo, hi = 0.0, 0.999
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (
                (mid, hi) if self.md1_p99_s(mid / self.alone_s) < KNEE_FACTOR * self.alone_s else (lo, mid)
            )
        return lo / self.alone_s

    def batched_mean_s(self, rate: float) -> float:
        return batched_sojourn_s(rate, self.alone_s, self.decode_steps, self.per_seq_step_s)

    def batched_knee(self) -> float:
        return (1 - 1 / KNEE_FACTOR) * batched_capacity_per_s(self.decode_steps, self.per_seq_step_s)


def fit_model(rows: list[dict], output_tokens: int) -> QueueModel | None:
    """The models' inputs from a sweep's rows (None if the lowest rate has no latency)."""
    if not rows or rows[0]["e2e_p50_ms"] is None:
        return None
    points = [(r["in_flight"], r["tpot_mean_s"]) for r in rows if r["tpot_mean_s"] is not None]
    c = 0.0
    if len(points) >= 2 and len({p[0] for p in points}) > 1:
        c = max(0.0, float(np.polyfit([p[0] for p in points], [p[1] for p in points], 1)[0]))
    return QueueModel(rows[0]["e2e_p50_ms"] / 1e3, max(1, output_tokens - 1), c)


def with_model_columns(rows: list[dict], model: QueueModel | None) -> list[dict]:
    out = []
    for row in rows:
        extra: dict[str, float | None] = {"md1_p99_ms": None, "batched_ms": None}
        if model:
            md1, batched = model.md1_p99_s(row["rate"]), model.batched_mean_s(row["rate"])
            extra = {
                "md1_p99_ms": 1e3 * md1 if math.isfinite(md1) else math.inf,
                "batched_ms": 1e3 * batched if math.isfinite(batched) else math.inf,
            }
        out.append({**row, **extra})
    return out


def max_rate_meeting(rows: list[dict], key: str, limit_ms: float) -> float | None:
    """The highest rate of the sweep whose `key` (a p99, ms) is within `limit_ms`, all rates below
    it too (None: not even the lowest)."""
    best = None
    for row in rows:
        if row["failed"] or row[key] is None or row[key] > limit_ms:
            break
        best = row["rate"]
    return best
