"""`python -m playground.commands.straggler_bench`: how often the straggler scores are right.

For each workload, `--runs` clean runs and as many with one rank slowed twice over (`fault.action=slow,
factor 2`, a rank and an onset drawn from `--seed`), alternated, each launched as a user types it. A
slowed run is a hit when it names exactly its slow rank, a miss when it does not name it, and names
others besides when it does; a clean run that names anyone is a false positive. The margins say how
close the calls were: the slow rank's relative score (named under 0.6), and the lowest any rank got
in a clean run.

Workloads (two ranks: the scores are judged only when every rank has a CPU of its own):
- collective: 60 timed 4 KiB all-reduces over shared memory (busy time: each call less its waits);
- train: 16 data-parallel training steps of the small transformer (a step's compute spans).

    python -m playground.commands.straggler_bench --runs 10     # about 5 minutes
"""

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from playground.tracing.stragglers import RELATIVE_THRESHOLD

WORKLOADS = {
    "collective": ["ring", "--transport", "shm", "--set", "params.sizes=[4KiB]", "--set", "params.iters=60"],
    "train": ["train", "--set", "params.steps=16", "--set", "params.sample_bytes=0"],
}
RANKS = 2
FACTOR = 2.0


def one_run(args: list[str], work: Path) -> dict:
    """result.json's stragglers of one run (exit 0 expected)."""
    cmd = ["run", *args, "--ranks", str(RANKS), "--out", str(work)]
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "playground", *cmd], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"straggler_bench: `python -m playground {' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}"
        )
    return json.loads(((work / "latest").resolve() / "result.json").read_text())["stragglers"]


def workload_row(name: str, runs: int, rng: random.Random, work: Path) -> dict:
    hits = misses = extra = false_pos = 0
    slow_scores, clean_lowest = [], []
    for i in range(runs):
        clean = one_run(WORKLOADS[name], work)
        false_pos += bool(clean["named"])
        if clean["ranks"]:  # a run on a busy machine may judge no section at all
            clean_lowest.append(min(r["relative"] for r in clean["ranks"].values()))
        rank, onset = rng.randrange(RANKS), rng.randint(4, 12)
        drill = [
            "--set",
            f"fault.rank={rank}",
            "--set",
            "fault.action=slow",
            "--set",
            f"fault.factor={FACTOR}",
        ]
        drill += ["--set", f"fault.after_ops={onset}"]
        slow = one_run(WORKLOADS[name] + drill, work)
        named = slow["named"]
        hits += named == [rank]
        misses += rank not in named
        extra += bool(set(named) - {rank})
        if str(rank) in slow["ranks"]:
            slow_scores.append(slow["ranks"][str(rank)]["relative"])
        print(
            f"{name} {i + 1}/{runs}: clean named {clean['named']}, slow rank {rank} -> named {named}",
            file=sys.stderr,
        )
    return {
        "workload": name,
        "runs": runs,
        "hits": hits,
        "misses": misses,
        "others_named": extra,
        "false_positives": false_pos,
        "slow_relative_median": round(statistics.median(slow_scores), 2) if slow_scores else None,
        "slow_relative_max": round(max(slow_scores), 2) if slow_scores else None,
        "clean_relative_min": round(min(clean_lowest), 2) if clean_lowest else None,
    }


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"  # -: no run judged a section


def markdown(rows: list[dict]) -> str:
    lines = [
        f"Each workload on {RANKS} ranks: clean runs, and runs with one rank slowed {FACTOR:g}x from a drawn post on "
        f"(a rank is named under {RELATIVE_THRESHOLD:g} of the fastest rank's speed).",
        "",
        "| workload | runs of each | slow rank named alone | missed | others named too | clean runs naming a rank "
        "| slow rank's score, median (max) | lowest score in a clean run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['runs']} | {r['hits']} | {r['misses']} | {r['others_named']} | "
            f"{r['false_positives']} | {_score(r['slow_relative_median'])} ({_score(r['slow_relative_max'])}) | "
            f"{_score(r['clean_relative_min'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m playground.commands.straggler_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--runs", type=int, default=10, help="clean and slowed runs of each workload (default 10)"
    )
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}"
    )
    ap.add_argument("--seed", type=int, default=1, help="draws the slow rank and its onset (default 1)")
    ap.add_argument("--out", help="write straggler_bench.md and .json there")
    args = ap.parse_args(argv)
    chosen = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown or not chosen:
        ap.error(f"--workloads: allowed: {', '.join(WORKLOADS)}")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="playground-straggler-bench-") as tmp:
        rows = [workload_row(w, args.runs, rng, Path(tmp)) for w in chosen]
    text = markdown(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "straggler_bench.md").write_text(text)
        (out / "straggler_bench.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
