"""The recovery page's sweep, fed canned runs: every interval under the drill in every round (its
seed the round's, the order alternating), goodput's median and range beside the model, and the
restarts' time to recover phase by phase. The restarts themselves are tested in
tests/test_recovery_run.py."""

import json
from pathlib import Path

from playground.commands import recovery_results
from playground.models import recovery as model

RESTART = {"teardown_s": 0.1, "restart_s": 0.3, "load_s": 0.01, "warmup_s": 0.05, "total_s": 0.46}


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
        steps = int(sets.get("params.steps", "400"))
        result = {
            "modes": [
                {
                    "losses": [1.0] * steps,
                    "wall_s": steps * (0.02 + (1 / every if every else 0) / 100),
                    "period_s": 0.02,
                }
            ],
            "checkpoints": [{"stall_s": {"median": 0.015}, "write_s": {"median": 0.01}, "bytes": 2**20}]
            if every
            else [],
            "recovery": {"restarts": [RESTART] if drill else []},
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
