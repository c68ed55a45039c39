"""`python -m playground.commands.flight_bench`: what the flight recorder costs a small all-reduce.

The recorder writes an entry per collective into a ring (native/oprecord.c); the question is whether
that is negligible beside the smallest collective it records: an 8-byte all-reduce over shared
memory, two ranks, untraced, whose whole cost is software. Two measurements, each with the recorder
off (PLAYGROUND_FLIGHT_ENTRIES=0: no ring) and on (the default ring of a launched rank), alternated
round by round so that drift in the machine falls on both alike:

- CPU per call, every rank a greenlet of one thread (commands/hotpath.py): free of wake-ups and
  the scheduler, the recorder's own instructions and cache misses are all that differ;
- wall time per call of a launched run (`run ring` at 8 bytes, rd, shm, as `bench` times it: the
  median of timed calls, each after a barrier), the number a user sees.

The table gives the median of the rounds for each and the difference in percent; the issue's bar
is 2%. The collective's fingerprint and its salted tags (comm/desync.py) are not switched off:
they are the mismatch check, always on, and both sides pay them.

    python -m playground.commands.flight_bench                 # 5 rounds, about a minute
    python -m playground.commands.flight_bench --rounds 11 --out docs-work/flight
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from playground.comm import flight
from playground.commands.hotpath import measure

CALLS = 5000
RUN_ITERS = 3000


def cpu_round(entries: int, calls: int) -> float:
    """CPU us per rank per 8-byte all-reduce, untraced, with a ring of `entries` (0: none)."""
    return measure(2, 8, "rd", "shm", calls, traced=False, flight_entries=entries)


def wall_round(entries: int, iters: int, work: Path) -> float:
    """The median time (us) of a launched 8-byte rd all-reduce over shm, 2 ranks, untraced."""
    env = {**os.environ, flight.ENV_ENTRIES: str(entries)}
    args = ["run", "ring", "--ranks", "2", "--transport", "shm", "--out", str(work)]
    args += ["--set", "params.sizes=[8]", "--set", "params.algorithm=[rd]", "--set", f"params.iters={iters}"]
    args += [
        "--set",
        "params.warmup=200",
        "--set",
        "params.trace_messages=false",
        "--set",
        "params.check=false",
    ]
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "playground", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"flight_bench: `python -m playground {' '.join(args)}` failed:\n{proc.stderr[-2000:]}"
        )
    result = json.loads(((work / "latest").resolve() / "result.json").read_text())
    return float(result["rows"][0]["time_us"])


def compare(rounds: int, calls: int, iters: int, work: Path) -> list[dict]:
    on = flight.entries_from_env()
    samples: dict[tuple[str, int], list[float]] = {}
    for r in range(rounds):
        order = (0, on) if r % 2 == 0 else (on, 0)
        for entries in order:
            samples.setdefault(("cpu", entries), []).append(cpu_round(entries, calls))
        for entries in order:
            samples.setdefault(("wall", entries), []).append(wall_round(entries, iters, work))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    rows = []
    for what, label in (("cpu", "CPU per call, greenlets (us)"), ("wall", "time per call, launched (us)")):
        off_us, on_us = statistics.median(samples[(what, 0)]), statistics.median(samples[(what, on)])
        rows.append(
            {
                "measure": label,
                "off_us": round(off_us, 3),
                "on_us": round(on_us, 3),
                "overhead_pct": round((on_us / off_us - 1) * 100, 2),
                "rounds": rounds,
                "spread_off": f"{min(samples[(what, 0)]):.2f}-{max(samples[(what, 0)]):.2f}",
                "spread_on": f"{min(samples[(what, on)]):.2f}-{max(samples[(what, on)]):.2f}",
            }
        )
    return rows


def markdown(rows: list[dict], entries: int) -> str:
    lines = [
        f"8-byte all-reduce (rd, 2 ranks, shared memory, untraced); recorder off (no ring) against on ({entries} entries):",
        "",
        "| measure | off | on | on/off - 1 | rounds | off, min-max | on, min-max |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['measure']} | {r['off_us']} | {r['on_us']} | {r['overhead_pct']:+.2f}% | {r['rounds']} | "
            f"{r['spread_off']} | {r['spread_on']} |"
        )
    worst = max(r["overhead_pct"] for r in rows)
    lines += ["", f"The recorder's cost: at most {worst:+.2f}% here (the bar: 2% of the call's time)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m playground.commands.flight_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of each (default 5)")
    ap.add_argument("--calls", type=int, default=CALLS, help="all-reduces per CPU round (default 5000)")
    ap.add_argument(
        "--iters", type=int, default=RUN_ITERS, help="timed calls per launched run (default 3000)"
    )
    ap.add_argument("--out", help="write flight_bench.md and .json there")
    args = ap.parse_args(argv)
    if min(args.rounds, args.calls, args.iters) < 1:
        ap.error("--rounds, --calls and --iters must be >= 1")
    with tempfile.TemporaryDirectory(prefix="playground-flight-bench-") as tmp:
        rows = compare(args.rounds, args.calls, args.iters, Path(tmp))
    text = markdown(rows, flight.entries_from_env())
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "flight_bench.md").write_text(text)
        (out / "flight_bench.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
