"""`python -m playground.commands.live_bench`: what watching a run on the live page costs the run.

The page's server runs in the launcher's process and reads the files the ranks write anyway; the
question is whether that work (and the page's polling) slows the ranks. Each round runs the same
run twice, as a user types it, alternated so that drift in the machine falls on both alike: plain,
and with `--live` while a client plays an open page and a Prometheus scrape (GET /state.json and
/metrics every POLL_S). Two workloads, two ranks each:

- collective: the median time of an 8-byte all-reduce (rd, shared memory, untraced), as `bench`
  times it: the smallest operation, whose whole cost is software;
- train: the median step time of rank 0 over a few data-parallel steps of the small transformer
  (its `train.step` events), the run the page has the most to show of.

The table gives the median of the rounds for each and the difference in percent; the issue's bar is 2%.

    python -m playground.commands.live_bench                  # 5 rounds, about two minutes
    python -m playground.commands.live_bench --rounds 11 --out docs-work/live
"""

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx

from playground.tracing.trace import read_events

POLL_S = 0.5
RUN_ITERS = 3000
TRAIN_STEPS = 12
WORKLOADS = {
    "collective": [
        "ring",
        "--transport",
        "shm",
        *("--set", "params.sizes=[8]", "--set", "params.algorithm=[rd]", "--set", "params.warmup=200"),
        *("--set", "params.trace_messages=false", "--set", "params.check=false"),
    ],
    "train": ["train", "--set", "params.sample_bytes=0"],
}
LABELS = {"collective": "8-byte all-reduce (us)", "train": "training step (ms)"}


def _args(workload: str, iters: int, steps: int, work: Path) -> list[str]:
    sizes = (
        ["--set", f"params.iters={iters}"] if workload == "collective" else ["--set", f"params.steps={steps}"]
    )
    return ["run", *WORKLOADS[workload], *sizes, "--ranks", "2", "--out", str(work)]


def _poll(url: str, stop: threading.Event) -> None:
    """An open page and a scraper: the state and the metrics every POLL_S until `stop`."""
    with httpx.Client(timeout=10) as client:
        while not stop.wait(POLL_S):
            for route in ("state.json", "metrics"):
                try:
                    client.get(url + route)
                except httpx.HTTPError:
                    pass  # between the run's end and Ctrl-C the server may be going


def _live_run(cmd: list[str]) -> None:
    """The run with --live, watched, then Ctrl-C once the page shows its final state."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    stop = threading.Event()
    poller = None
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("live page: http") and poller is None:
                poller = threading.Thread(target=_poll, args=(line.split()[2], stop))
                poller.start()
            if "shows its final state" in line:
                break
        stop.set()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    finally:
        stop.set()
        if poller is not None:
            poller.join()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if code != 0:
        raise SystemExit(f"live_bench: `{' '.join(cmd[3:])}` exited with {code}")


def one_run(workload: str, live: bool, iters: int, steps: int, work: Path) -> float:
    """The workload's number (us per all-reduce, or ms per training step) for one run."""
    cmd = [sys.executable, "-P", "-m", "playground", *_args(workload, iters, steps, work)]
    if live:
        _live_run([*cmd, "--live"])
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"live_bench: `{' '.join(cmd[3:])}` failed:\n{proc.stderr[-2000:]}")
    run_dir = (work / "latest").resolve()
    if workload == "collective":
        return float(json.loads((run_dir / "result.json").read_text())["rows"][0]["time_us"])
    steps_us = [e["dur"] for e in read_events(run_dir / "rank-0.jsonl") if e["name"] == "train.step"]
    return statistics.median(steps_us[1:] or steps_us) / 1000  # the first step warms up


def compare(workloads: list[str], rounds: int, iters: int, steps: int, work: Path) -> list[dict]:
    rows = []
    for workload in workloads:
        samples: dict[bool, list[float]] = {False: [], True: []}
        for r in range(rounds):
            for live in (False, True) if r % 2 == 0 else (True, False):
                samples[live].append(one_run(workload, live, iters, steps, work))
            print(f"{workload}: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
        off, on = statistics.median(samples[False]), statistics.median(samples[True])
        rows.append(
            {
                "measure": LABELS[workload],
                "plain": round(off, 3),
                "live": round(on, 3),
                "overhead_pct": round((on / off - 1) * 100, 2),
                "rounds": rounds,
                "spread_plain": f"{min(samples[False]):.2f}-{max(samples[False]):.2f}",
                "spread_live": f"{min(samples[True]):.2f}-{max(samples[True]):.2f}",
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        f"2 ranks; each run plain against with `--live`, the page and /metrics polled every {POLL_S:g} s:",
        "",
        "| measure | plain | live | live/plain - 1 | rounds | plain, min-max | live, min-max |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['measure']} | {r['plain']} | {r['live']} | {r['overhead_pct']:+.2f}% | {r['rounds']} | "
            f"{r['spread_plain']} | {r['spread_live']} |"
        )
    worst = max(r["overhead_pct"] for r in rows)
    lines += ["", f"The live page's cost: at most {worst:+.2f}% here (the bar: 2% of the run's time)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m playground.commands.live_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of each (default 5)")
    ap.add_argument("--iters", type=int, default=RUN_ITERS, help="timed all-reduces per run (default 3000)")
    ap.add_argument("--steps", type=int, default=TRAIN_STEPS, help="training steps per run (default 12)")
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"some of {','.join(WORKLOADS)} (default: both)"
    )
    ap.add_argument("--out", help="write live_bench.md and .json there")
    args = ap.parse_args(argv)
    workloads = args.workloads.split(",")
    if not set(workloads) <= set(WORKLOADS):
        ap.error(f"--workloads: allowed: {', '.join(WORKLOADS)}; got {args.workloads}")
    if min(args.rounds, args.iters, args.steps) < 1:
        ap.error("--rounds, --iters and --steps must be >= 1")
    with tempfile.TemporaryDirectory(prefix="playground-live-bench-") as tmp:
        rows = compare(workloads, args.rounds, args.iters, args.steps, Path(tmp))
    text = markdown(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "live_bench.md").write_text(text)
        (out / "live_bench.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
