"""The batching lab's figures: one (mode, offered rate) of a batching server, and its capacity.

A batch of b costs fixed + per_item x b, so one-at-a-time capacity is 1 / (fixed + per_item)
and batched capacity max_batch / (fixed + per_item x max_batch). Throughput counts *departures*
in the steady part of the sending window, so a run never waits for a backlog's tail; the replay
(an ideal batching server on the same send times) shows what an overhead-free server would do.
"""

import math

import numpy as np

from playground.models import queueing as qm

MS = 1000.0


def rate_stats(
    fixed_s: float,
    per_item_s: float,
    mode: int,
    lam: float,
    t0: float,
    offsets: np.ndarray,
    sent: np.ndarray,
    recv: np.ndarray,
    batch: np.ndarray,
    dropped: int,
) -> dict:
    """One row: measured throughput and latency of one (mode = max batch, offered rate lam), models
    beside. `recv` is nan for requests whose reply never came (dropped with the backlog)."""
    done = ~np.isnan(recv)
    latency = (recv - sent)[done]
    # Throughput counts departures in the steady part of the sending window (after its first
    # quarter, while the queue fills): counting departures, not requests, leaves no tail to wait
    # for. The window is where the sends really happened: on a busy machine the client can be late.
    w0 = sent[0] + (sent[-1] - sent[0]) / 4
    w1 = sent[-1]
    span = max(w1 - w0, 1e-9)
    arrived = (len(sent) - 1) / max(sent[-1] - sent[0], 1e-9)
    throughput = np.count_nonzero((recv[done] >= w0) & (recv[done] <= w1)) / span
    replay_dep = qm.batch_departures(sent - t0, fixed_s, per_item_s, mode) + t0
    replay_lat = (replay_dep - sent)[done]
    _, replay_sizes = np.unique(replay_dep[done], return_counts=True)
    capacity = qm.batch_capacity_per_s(fixed_s, per_item_s, mode)
    return {
        "mode": "batched" if mode > 1 else "one at a time",
        "max_batch": mode,
        "offered_per_s": lam,
        "arrived_per_s": arrived,
        "throughput_per_s": throughput,
        "model_per_s": min(arrived, capacity),
        "capacity_per_s": capacity,
        "replay_per_s": np.count_nonzero((replay_dep >= w0) & (replay_dep <= w1)) / span,
        "mean_ms": float(np.mean(latency)) * MS if latency.size else math.nan,
        "p99_ms": float(np.percentile(latency, 99)) * MS if latency.size else math.nan,
        "replay_mean_ms": float(np.mean(replay_lat)) * MS if replay_lat.size else math.nan,
        "mean_batch": float(np.mean(batch[done])) if latency.size else math.nan,
        "replay_batch": float(np.sum(replay_sizes**2)) / max(1, int(np.sum(replay_sizes))),
        "fluid_batch": qm.batch_steady_size(lam, fixed_s, per_item_s, mode),
        "sent": int(len(offsets)),
        "dropped": int(dropped),
        "stable": bool(lam < capacity),
    }


def with_deviation(rows: list[dict]) -> list[dict]:
    """The rows with `dev_pct`: measured throughput against the model, in percent."""
    return [{**r, "dev_pct": 100 * (r["throughput_per_s"] / r["model_per_s"] - 1)} for r in rows]


def capacity_rows(rows: list[dict], modes: tuple[int, ...]) -> list[dict]:
    """Per mode: the best measured throughput against the modelled capacity; saturated when some
    offered rate exceeded the capacity (only then can the best reach it)."""
    out = []
    for mode in modes:
        mine = [r for r in rows if r["max_batch"] == mode]
        best = max(r["throughput_per_s"] for r in mine)
        cap = mine[0]["capacity_per_s"]
        out.append(
            {
                "mode": mine[0]["mode"],
                "max_batch": mode,
                "model_per_s": cap,
                "best_per_s": best,
                "dev_pct": 100 * (best / cap - 1),
                "saturated": any(not r["stable"] for r in mine),
            }
        )
    return out
