"""A calibration.json for tests: made-up but self-consistent figures, signed as this machine's.

Times follow known lines so the tests can check what models/hostfit.py derives: a ping-pong one-way
time of two copies (10 GB/s on one core, 20 on all) plus 20 us + 1 ns/B below 64 KiB and 40 us +
0.2 ns/B above (ipc; shm a tenth of it); CPU per message the copies plus half that line at 2 ranks,
plus 30 us and the whole line with more ranks than cores; adds at 5 and 10 GB/s, a 4 ms slice, 25 us
to wake an idle core.
"""

import json
from pathlib import Path

from playground.core.version import VERSION
from playground.models.calibration import FORMAT, this_machine

SIZES = (64, 4096, 65536, 1 << 20)
COPY_GBPS, ADD_GBPS = 10.0, 5.0


def line_s(transport: str, n: int) -> float:
    """A message's time beside its two copies: what the piecewise fit must recover."""
    scale = 0.1 if transport == "shm" else 1.0
    return scale * (20e-6 + n * 1e-9 if n < 65536 else 40e-6 + n * 0.2e-9)


def copies_s(n: int) -> float:
    return 2 * n / (COPY_GBPS * 1e9)


def record(transports=("ipc", "shm"), **machine) -> dict:
    cores = this_machine()["cores"]
    rank_counts = sorted({2, 2 * cores, 4 * cores})
    entries = {}
    for t in transports:
        patterns = []
        for ranks in rank_counts:
            for n in SIZES:
                t_s = line_s(t, n) + copies_s(n)
                cpu = (line_s(t, n) / 2 if ranks == 2 else 30e-6 + line_s(t, n)) + copies_s(n)
                for pattern in ("pingpong", "pingping"):
                    patterns.append(
                        {
                            "pattern": pattern,
                            "size": n,
                            "ranks": ranks,
                            "reps": 10,
                            "time_s": t_s,
                            "cpu_s": cpu,
                            "main_cpu_s": cpu,
                            "sleeps": t != "shm" or ranks > 2 * cores,
                        }  # fmt: skip
                    )
        entries[t] = {"bounds": [0, 65536], "segment_bytes": 4 << 20, "patterns": patterns}
    rates = [
        {
            "bytes": b,
            "copy_one_gbps": COPY_GBPS,
            "copy_all_gbps": 2 * COPY_GBPS,
            "add_one_gbps": ADD_GBPS,
            "add_all_gbps": 2 * ADD_GBPS,
        }  # fmt: skip
        for b in (64 << 10, 1 << 20, 64 << 20)
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "machine": {**this_machine(), **machine},
        "date": "2026-01-01T00:00:00+0000",
        "host": {"rates": rates, "slice_s": 4e-3, "wake_s": 25e-6},
        "transports": entries,
    }


def write(path: Path, **kwargs) -> Path:
    path.write_text(json.dumps(record(**kwargs)))
    return path
