"""One load of the single-server queue: from per-request stamps to latency, replay and Little.

The stamps are the client's and server's CLOCK_MONOTONIC readings, one row each: scheduled send,
actual send, service start, service end, reply received, and the service demand the request
carried. Beside the measurement, the *replay* is an ideal FIFO server fed the same send times
and demands: measured - replay is what the real system adds (ZeroMQ hops, timer overshoot),
replay - formula is sampling noise. Little's law is checked over the arrival window, where
requests still in flight at its end make it a real check rather than an identity.
"""

import math

import numpy as np

from playground.models import queueing as qm

MS = 1000.0


def deviation_pct(measured: float, model: float) -> float:
    """How far `measured` is above (+) or below (-) `model`, in percent; nan without a model."""
    return 100.0 * (measured / model - 1.0) if model else math.nan


def load_stats(rho: float, service_s: float, kind: str, warmup: int, stamps: np.ndarray) -> dict:
    """Measured figures of one load, the models beside them, and where the time went (all ms).

    `stamps` rows: scheduled, sent, start, end, recv, demand (seconds); the first `warmup`
    requests are left out of the latency statistics and of Little's window."""
    scheduled, sent, start, end, recv, demand = stamps
    steady = slice(warmup, None)
    latency = (recv - sent)[steady]
    replay = (qm.fifo_departures(sent, demand) - sent)[steady]
    delivered = end - start
    replay_delivered = (qm.fifo_departures(sent, delivered) - sent)[steady]
    window = (sent[warmup], sent[-1])
    in_window = (sent >= window[0]) & (sent <= window[1])
    rate = (np.count_nonzero(in_window) - 1) / (window[1] - window[0])
    mean_latency_s = float(np.mean((recv - sent)[in_window]))
    eff_rho = rate * float(np.mean(delivered))
    model_mean = qm.mm1_mean_sojourn_s if kind == "exponential" else qm.md1_mean_sojourn_s
    model_q = qm.mm1_sojourn_quantile_s if kind == "exponential" else qm.md1_sojourn_quantile_s
    return {
        "load": rho,
        "rate_per_s": rho / service_s,
        "num": int(latency.size),
        "mean_ms": float(np.mean(latency)) * MS,
        "p50_ms": float(np.percentile(latency, 50)) * MS,
        "p99_ms": float(np.percentile(latency, 99)) * MS,
        "model_mean_ms": model_mean(service_s, rho) * MS,
        "model_p50_ms": model_q(service_s, rho, 0.5) * MS,
        "model_p99_ms": model_q(service_s, rho, 0.99) * MS,
        "mm1_mean_ms": qm.mm1_mean_sojourn_s(service_s, rho) * MS,
        "md1_mean_ms": qm.md1_mean_sojourn_s(service_s, rho) * MS,
        "replay_mean_ms": float(np.mean(replay)) * MS,
        "replay_p99_ms": float(np.percentile(replay, 99)) * MS,
        "replay_delivered_mean_ms": float(np.mean(replay_delivered)) * MS,
        "eff_load": eff_rho,
        "eff_model_mean_ms": model_mean(float(np.mean(delivered)), eff_rho) * MS
        if eff_rho < 0.99
        else math.nan,
        "demand_mean_ms": float(np.mean(demand)) * MS,
        "delivered_mean_ms": float(np.mean(delivered)) * MS,
        "overshoot_mean_ms": float(np.mean(delivered - demand)) * MS,
        "overhead_mean_ms": float(np.mean(latency) - np.mean(replay)) * MS,
        "messaging_mean_ms": float(np.mean(latency) - np.mean(replay_delivered)) * MS,
        "late_send_mean_ms": float(np.mean(sent - scheduled)) * MS,
        "late_send_p99_ms": float(np.percentile(sent - scheduled, 99)) * MS,
        "little_L": qm.time_average_in_system(sent, recv, *window),
        "little_rate_per_s": rate,
        "little_W_ms": mean_latency_s * MS,
        "little_lambda_W": qm.little_number_in_system(rate, mean_latency_s),
        "little_window_s": float(window[1] - window[0]),
    }
