"""The clients' op latencies, as the KV-cache lab's report shows them (the server's memory samples
are playground/kvcache/stats.py's, which the serving lab shares)."""

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
