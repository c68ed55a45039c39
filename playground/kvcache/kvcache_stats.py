"""From the server's samples and the clients' timings to the figures of the report (plots.py draws them).

Samples are (t_s, live_seqs, used_slots, allocated_slots, largest_free_run_slots), taken after
mutating ops at most every `sample_every_s`. Averages are time-weighted over the *busy period*
(samples with at least half the peak number of live sequences), so the ramp-up and the last
stragglers of a replay do not dilute the steady state the lecture talks about.
"""

import numpy as np


def percentiles_us(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_us": float("nan"), "p99_us": float("nan"), "n": 0}
    a = np.asarray(values)
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)), "n": int(a.size)}


def merge_latencies(per_client: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    merged: dict[str, list[float]] = {}
    for lat in per_client:
        for op, values in lat.items():
            merged.setdefault(op, []).extend(values)
    merged["all"] = [v for op, vs in merged.items() if op not in ("stats", "ping") for v in vs]
    return merged


def summarize_samples(samples: list, capacity_slots: int) -> dict:
    """Busy-period time averages of concurrency, utilisation and fragmentation (fractions)."""
    if not samples:
        nan = float("nan")
        return {
            "mean_live_seqs": nan,
            "utilisation": nan,
            "internal_frag": nan,
            "external_frag": nan,
            "peak_utilisation": nan,
        }
    s = np.asarray(samples, dtype=float)
    t, live, used, alloc, largest = s.T
    dt = np.diff(t, append=t[-1] + (np.mean(np.diff(t)) if len(t) > 1 else 1.0))
    busy = live >= 0.5 * live.max()
    w = dt * busy
    if w.sum() <= 0:
        w = busy.astype(float)
    free = capacity_slots - alloc
    ext = np.where(free > 0, 1.0 - largest / np.maximum(free, 1), 0.0)
    avg = lambda x: float(np.sum(x * w) / np.sum(w))  # noqa: E731
    return {
        "mean_live_seqs": avg(live),
        "utilisation": avg(used / capacity_slots),
        "internal_frag": avg((alloc - used) / capacity_slots),
        "external_frag": avg(ext),
        "peak_utilisation": float(np.max(used / capacity_slots)),
    }


def downsample(samples: list, max_points: int = 1500) -> list:
    if len(samples) <= max_points:
        return samples
    idx = np.linspace(0, len(samples) - 1, max_points).astype(int)
    return [samples[i] for i in idx]
