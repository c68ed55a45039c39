"""The recovery page's sweep, fed canned runs: every interval under the drill in every round (its
seed the round's, the order alternating), goodput's median and range beside the model, and the
restarts' time to recover phase by phase. The restarts themselves are tested in
tests/test_recovery_run.py."""

import json
from pathlib import Path

from playground.commands import recovery_results
from playground.models import recovery as model

RESTART = {"teardown_s": 0.1, "restart_s": 0.3, "load_s": 0.01, "warmup_s": 0.05, "total_s": 0.46}
WAY = {
    "restart": {**RESTART, "detection_s": 0.01, "steps_redone": 9},
    "peer": {"detection_s": 0.01, "teardown_s": 0.001, "restart_s": 0.1, "load_s": 0.02, "warmup_s": 0.04,
             "total_s": 0.17, "steps_redone": 0},
    "shrink": {"detection_s": 0.01, "teardown_s": 0.001, "restart_s": 0.09, "load_s": 0.0, "warmup_s": 0.0,
               "total_s": 0.1, "steps_redone": 0},
}  # fmt: skip


class CannedRuns:
    """results' Context as recovery_results uses it: `run` records the command, `latest` holds a
    result.json made up from it (a checkpoint every k steps: k/100 of a second lost per step; under
    the drill one restart per run)."""

    quick, rounds = False, 2

    def __init__(self, tmp: Path):
        self.out = self.work = tmp
        self.calls: list[tuple[str, ...]] = []

    def run(self, *args: str) -> None:
        self.calls.append(args)

    def latest(self, runs: Path) -> Path:
        sets = dict(a.split("=", 1) for a in self.calls[-1] if "=" in a)
        every = int(sets.get("params.checkpoint_every", "0"))
        drill = sets.get("recovery.mtbf_s", "null") != "null"
        way = sets.get("recovery.way")  # the three ways' runs: rank 1 killed once
        steps = int(sets.get("params.steps", "400"))
        result = {
            "modes": [
                {
                    "losses": [1.0] * steps,
                    "wall_s": steps * (0.02 + (1 / every if every else 0) / 100),
                    "period_s": 0.02,
                    "hashes": ["c0ffee", "c0ffee" if way != "shrink" else "c0ffef"],
                }
            ],
            "checkpoints": [{"stall_s": {"median": 0.015}, "write_s": {"median": 0.01}, "bytes": 2**20}]
            if every
            else [],
            "recovery": {"restarts": [RESTART] if drill else [{**WAY[way], "way": way}] if way else []},
        }
        run_dir = self.work / f"run-{len(self.calls)}"
        run_dir.mkdir()
        (run_dir / "result.json").write_text(json.dumps(result))
        return run_dir


def test_the_sweep_runs_every_interval_each_round_and_tables_goodput_beside_the_model(tmp_path):
    ctx = CannedRuns(tmp_path)
    page = recovery_results.section(ctx)
    swept = [c for c in ctx.calls if f"recovery.mtbf_s={recovery_results.MTBF_S}" in c]
    intervals = [
        int(next(a for a in c if a.startswith("params.checkpoint_every=")).split("=")[1]) for c in swept
    ]
    n = len(recovery_results.INTERVALS)
    assert intervals == [*recovery_results.INTERVALS, *reversed(recovery_results.INTERVALS)]
    assert [c.count("recovery.seed=1") for c in swept] == [1] * n + [0] * n
    assert all(f"params.steps={recovery_results.STEPS}" in c for c in swept)
    step_s, stall_s = 0.02, 0.015
    for k in recovery_results.INTERVALS:
        goodput = 1 / (0.02 + 1 / k / 100)
        predicted = model.goodput(k, step_s, stall_s, RESTART["total_s"], recovery_results.MTBF_S)
        row = f"| {k} | 1 | {goodput:.2f} ({goodput:.2f}-{goodput:.2f}) | {predicted:.2f} | "
        row += f"{goodput / predicted:.2f} | 15.0 | {predicted:.2f} | {goodput / predicted:.2f} |"
        assert row in page
    assert "median time to recover R = 0.46 s" in page
    assert (
        "| 0.100 (0.100-0.100) | 0.300 (0.300-0.300) | 0.010 (0.010-0.010) | 0.050 (0.050-0.050) | 0.460 (0.460-0.460) |"
        in page
    )
    assert (tmp_path / "recovery-goodput.svg").exists()


def test_a_sweep_without_a_restart_says_so():
    assert recovery_results.restart_lines([]) == [
        "No restart happened: the runs ended before the drill's first kill.\n"
    ]


def test_the_three_ways_each_round_in_rotating_order_beside_the_fault_free_hash(tmp_path):
    ctx = CannedRuns(tmp_path)
    lines = recovery_results.ways_part(ctx, tmp_path)
    ways = [dict(a.split("=", 1) for a in c if "=" in a).get("recovery.way") for c in ctx.calls]
    assert ways == [None, "restart", "peer", "shrink", "peer", "shrink", "restart"]  # the clean run first
    assert all("--max-restarts" in c for c in ctx.calls)
    shrink = [c for c in ctx.calls if "recovery.way=shrink" in c]
    assert all("params.checkpoint_every=0" in c for c in shrink)
    table = "\n".join(lines)
    assert "(c0ffee)" in table
    assert (
        "| restart | 2 | 0.010 (0.010-0.010) | 0.100 (0.100-0.100) |" in table and "| 9 | 2 of 2 |" in table
    )
    assert "| peer | 2 |" in table and "| 0.170 (0.170-0.170) | 0 | 2 of 2 |" in table
    assert "| shrink | 2 |" in table and "| 0 | 0 of 2 |" in table  # equal to rounding, not bit for bit
