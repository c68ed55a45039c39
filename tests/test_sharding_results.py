"""The step-time page's sharded part (`results --sections steptime`): the trade table's verdicts from
synthetic rows, and the whole part at tiny sizes, every run it asks for answered by one real tiny run
(ZeRO-2, ZeRO-3 and FSDP2 beside it), the simulator's study run for real."""

import pytest
from tools import NO_TORCH, importable, need

from playground.cli.testing import run_scenario
from playground.commands import sharding_results as sr


def test_the_trade_table_counts_the_rows_within_15_percent():
    rows = {
        ("train-modes", 2, "zero3", "0"): [{"ratio": r, "measured_ms": 10.0, "exposed_model_ms": 1.0, "model_ms": 9.0}
                                           for r in (1.10, 1.12, 1.30)],
        ("train-modes", 2, "zero2", "-"): [{"ratio": 1.2, "measured_ms": 12.0, "exposed_model_ms": 1.0, "model_ms": 10.0}],
    }  # fmt: skip
    lines = sr.trade_table(rows)
    assert lines[2].startswith("| train-modes | 2 | zero3 | 0 | 10.0 (10.0-10.0) |") and lines[2].endswith(
        "| yes |"
    )
    assert lines[3].endswith("| no |") and lines[-1] == "1 of 2 rows within 15% (the median ratio)."


class TinyContext:
    """results' Context, every `run` answered by the one run in `done`."""

    def __init__(self, work, done):
        self.work, self.quick, self.rounds, self.done, self.commands = work, True, 1, done, []

    def run(self, *args, timeout_s=0):
        self.commands.append("python -m playground " + " ".join(args))

    def latest(self, runs):
        return self.done


@pytest.mark.timeout(90)
def test_the_part_reads_real_runs_and_writes_every_table(tmp_path):
    need(importable("torch"), NO_TORCH)
    sets = ["params.layers=2", "params.d_model=16", "params.heads=2", "params.context=16", "params.batch=4",
            "params.steps=2", "params.sample_bytes=0", "params.mode=[bucketed,zero2,zero3]", "params.baseline=fsdp"]  # fmt: skip
    code, _, out, err = run_scenario("train-modes", tmp_path, ranks=2, sets=sets, timeout_s=80)
    assert code == 0, out + err
    ctx = TinyContext(tmp_path / "work", tmp_path / "latest")
    page = sr.sharding_section(ctx)
    for heading in ("the trade", "The two pathologies", "against PyTorch FSDP2", "stops paying"):
        assert heading in page
    assert "| train-modes | 2 | zero3 | 1 |" in page and "| train-modes | 2 | zero3 | 0 |" in page
    assert "| 2 | zero2 | " in page and "(N-1)/N Ψ b" in page
    assert any(c.startswith("python -m playground.training.zero_scaling --ranks 2..8") for c in ctx.commands)
    assert any("params.baseline=fsdp" in c for c in ctx.commands)
    assert "| GPT-2 XL shape |" in page
