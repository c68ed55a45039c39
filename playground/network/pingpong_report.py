"""The ping-pong lab's report (lecture 5.1): per size, our one-way time and streaming bandwidth
beside bare pyzmq's, their ratios (the framework's overhead, or what shared memory gains), and
alpha + n / beta fitted to our one-way times."""

from pathlib import Path

from playground.core.sizes import format_size
from playground.display.report import Report, Table
from playground.models.alphabeta import fit_alpha_beta


def _gbps(bytes_per_s: float) -> str:
    """Two decimals, or three significant digits on a slow link (0.0118, not 0.01)."""
    gbps = bytes_per_s / 1e9
    return f"{gbps:.2f}" if gbps >= 0.1 else f"{gbps:.3g}"


def _budget_note(result: dict, num_sizes: int) -> str:
    """How many exchanges each size got, and why (nodes/pingpong.py: counts_within)."""
    budget_s, iters = result.get("budget_s"), result.get("iters")
    if budget_s is None:
        return f"fixed counts: {iters} timed round trips per size (params.budget_s: null)"
    return (
        f"time budget: {budget_s:g} s per size, {budget_s * num_sizes:g} s for {num_sizes} sizes "
        f"(params.budget_s), {result.get('elapsed_s', 0.0):.1f} s used; each size ran the most round trips "
        f"that fit, at most {iters} (params.iters), at least {result.get('min_iters')}"
    )


COLUMNS = {
    "size": "size (B)",
    "iters": "round trips",
    "ours_us": "ours one-way (us)",
    "raw_us": "raw pyzmq (us)",
    "lat_ratio": "ours/raw",
    "model_us": "alpha+n/beta (us)",
    "ours_gbps": "ours stream (GB/s)",
    "raw_gbps": "raw stream (GB/s)",
    "bw_ratio": "raw/ours",
}

# What the ratios say, by the path our messages took (the node's `ours_path`).
RATIO_NOTES = {
    "ZeroMQ": "ratios > 1 are the framework's overhead over bare pyzmq on the same transport and socket types",
    "ZeroMQ + rings": "ratios > 1 are the framework's overhead over bare pyzmq on the same transport and socket "
    "types; from 64 KiB ours sends the bytes through shared-memory rings (ZeroMQ carries their descriptors), "
    "so there ratios < 1 are what that gains",
}
SHM_NOTE = (
    "ours went through mailboxes in shared memory (--transport shm), raw pyzmq over ipc: "
    "ratios < 1 are what bypassing ZeroMQ on one host gains"
)


def report(results: list[dict], run_dir: Path | None = None) -> Report:
    """The report from rank 0's rows (one per size; rank 1 measured the same exchanges)."""
    rows = [
        {
            "size": r["size"],
            "iters": r.get("iters"),
            "ours_us": r["ours_oneway_us"],
            "raw_us": r["raw_oneway_us"],
            "lat_ratio": r["ours_oneway_us"] / r["raw_oneway_us"],
            "ours_gbps": r["ours_stream_gbps"],
            "raw_gbps": r["raw_stream_gbps"],
            "bw_ratio": r["raw_stream_gbps"] / r["ours_stream_gbps"],
        }
        for r in results[0]["rows"]
    ]
    notes = fit_notes(rows)
    notes.append(RATIO_NOTES.get(results[0].get("ours_path", "ZeroMQ"), SHM_NOTE))
    data = {}
    if "iters" in results[0]:  # the node says how it chose its counts
        notes.append(_budget_note(results[0], len(rows)))
        data = {k: results[0].get(k) for k in ("budget_s", "elapsed_s")}
    return Report(
        ok=True,
        data=data,
        tables=[Table(f"point-to-point, rank 0 <-> rank 1 ({len(results)} ranks)", rows, COLUMNS)],
        notes=notes,
    )


def fit_notes(rows: list[dict]) -> list[str]:
    """alpha + n / beta fitted to our one-way times (each row gets its `model_us`), as a note."""
    if len(rows) < 2:
        return []
    try:
        fit = fit_alpha_beta([r["size"] for r in rows], [r["ours_us"] * 1e-6 for r in rows])
    except ValueError as e:
        return [f"no alpha-beta fit: {e}"]
    for r in rows:
        r["model_us"] = (fit.alpha_s + r["size"] / fit.beta_bytes_per_s) * 1e6
    return [
        f"alpha-beta fit to our one-way times: alpha = {fit.alpha_s * 1e6:.1f} us, "
        f"beta = {_gbps(fit.beta_bytes_per_s)} GB/s, half-bandwidth size n1/2 = "
        f"{format_size(int(fit.alpha_s * fit.beta_bytes_per_s))}"
    ]
