"""What both KV-cache labs compute from a server's own record (kv_ops.KVServer.stats and
.samples): busy-period averages of its memory, the samples thinned for result.json, and the
failures of a server that still holds something after its workload.

Samples are (t_s, live_seqs, used_slots, allocated_slots, largest_free_run_slots), taken after
mutating ops at most every `sample_every_s`. Averages are time-weighted over the *busy period*
(samples with at least half the peak number of live sequences), so the ramp-up and the last
stragglers of a replay do not dilute the steady state the lecture talks about.
"""

import numpy as np

from playground.kvcache.server import protocol as P


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


def leak_failures(pol: dict) -> list[str]:
    """A setup's (`policy`, server `stats`) failures: sequences or slots still held once every
    client freed its own, internal errors."""
    st, out = pol["stats"], []
    if st["live_seqs"] or st["allocated_slots"]:
        out.append(
            f"{pol['policy']}: {st['live_seqs']} sequences / {st['allocated_slots']} slots still held "
            f"after every client freed its sequences"
        )
    if st["errors"].get(P.INTERNAL_ERROR):
        out.append(f"{pol['policy']}: {st['errors'][P.INTERNAL_ERROR]} internal errors in the server")
    return out
