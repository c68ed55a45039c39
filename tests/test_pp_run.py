"""Real multi-process runs of `run train-pipeline`: GPipe and 1F1B at p = 2 and 4 equal one process
in float64, alone and on a 2 x 2 data x pipeline grid; the activations held are exactly the
formulas; bad layouts are one line and exit 2; a killed or hung stage fails the run naming the
stage and the micro-batch its neighbours waited for, and leaves nothing behind."""

import pytest
from test_failures import finish, launch
from tools import NO_TORCH, importable, need

from playground.cli.testing import run_scenario
from playground.training.pipeline.schedules import SCHEDULES
from playground.transformer import AdamConfig, BatchSampler, ModelConfig, lecture_bytes
from playground.transformer.plan import pipeline_plan
from playground.transformer.train import train_one_process

CONFIG = ModelConfig(layers=4, d_model=16, heads=2, context=16, dtype="float64")
BATCH, STEPS, LR = 8, 3, 5e-3
TINY = [
    "params.layers=4",
    "params.d_model=16",
    "params.heads=2",
    "params.context=16",
    f"params.batch={BATCH}",
    f"params.steps={STEPS}",
    f"params.lr={LR}",
    "params.calibration_repeats=1",
]
# Measured: parameters within 2e-15 to 6e-14 of the largest after 3 steps, losses within 2e-16;
# the tolerance leaves room for other BLAS builds' summation orders.
PARAM_TOLERANCE, LOSS_TOLERANCE = 1e-12, 1e-13


@pytest.fixture(scope="module")
def one_process() -> list[float]:
    sampler = BatchSampler(lecture_bytes(), CONFIG.context, BATCH, seed=0)
    _, losses = train_one_process(CONFIG, sampler, STEPS, adam=AdamConfig(lr=LR), seed=0)
    return losses


def check_runs(result: dict, one_process: list[float], num_stages: int, replicas: int) -> None:
    """Every run: equal to one process, the activations held exactly the formulas."""
    assert result["grid"] == {"data": replicas, "pipeline": num_stages}
    rows = BATCH // replicas
    plans = pipeline_plan(CONFIG, num_stages)
    for run in result["runs"]:
        m, schedule = run["m"], SCHEDULES[run["schedule"]]
        assert run["param_gap"] <= PARAM_TOLERANCE, run
        assert run["losses"] == pytest.approx(one_process, rel=LOSS_TOLERANCE)
        expected = [
            schedule.peak(num_stages, p.stage, m) * p.activation_bytes(CONFIG, rows // m, CONFIG.context)
            for p in plans
        ]
        assert run["held_bytes"] == run["formula_bytes"] == expected
        assert 0 <= run["bubble_pct"] < 100 and run["ideal_pct"] == pytest.approx(
            run["formula_pct"], abs=1e-9
        )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("num_stages,micro_batches", [(2, [1, 2, 4]), (4, [1, 4, 8])])
def test_gpipe_and_1f1b_equal_one_process(runs_dir, one_process, num_stages, micro_batches):
    listed = ",".join(map(str, micro_batches))
    sets = [*TINY, f"params.pipeline={num_stages}", f"params.micro_batches=[{listed}]"]
    code, result, out, err = run_scenario(
        "train-pipeline", runs_dir, ranks=num_stages, sets=sets, timeout_s=80
    )
    assert code == 0, out + err
    assert [(r["schedule"], r["m"]) for r in result["runs"]] == [
        (s, m) for s in ("gpipe", "1f1b") for m in micro_batches
    ]
    check_runs(result, one_process, num_stages, 1)
    files = set(result["files"])
    assert "bubble.png" in files and f"schedule-1f1b-m{micro_batches[-1]}.png" in files
    assert all((runs_dir / "latest" / f).stat().st_size > 0 for f in files)


@pytest.mark.timeout(60)
def test_one_stage_one_micro_batch_is_one_process_bit_for_bit(runs_dir):
    """p = 1, m = 1: the same operations in the same order as one process: bitwise equal."""
    sets = [*TINY, "params.pipeline=1", "params.micro_batches=[1]", "params.schedule=[gpipe]"]
    code, result, out, err = run_scenario("train-pipeline", runs_dir, ranks=1, sets=sets, timeout_s=50)
    assert code == 0, out + err
    (run,) = result["runs"]
    assert run["bitwise"] and run["param_gap"] == 0.0


@pytest.mark.timeout(90)
def test_a_2x2_data_x_pipeline_grid_equals_one_process(runs_dir, one_process):
    """4 ranks, 2 stages x 2 replicas: each stage's gradients all-reduced over its data group in
    DDP's buckets; every replica of a stage bit-identical (checked every step by the run)."""
    sets = [*TINY, "params.pipeline=2", "params.micro_batches=[1,2]", "params.mode=bucketed"]
    code, result, out, err = run_scenario("train-pipeline", runs_dir, ranks=4, sets=sets, timeout_s=80)
    assert code == 0, out + err
    check_runs(result, one_process, 2, 2)
    assert "2 stages x 2 replicas (4 ranks)" in " ".join(out.split())


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "ranks,sets,key,says",
    [
        (4, ["params.pipeline=3"], "params.pipeline", "3 stages must divide the model's 4 layers"),
        (
            2,
            ["params.pipeline=4"],
            "params.pipeline",
            "a grid of data 1 x pipeline 4 = 4 ranks, but the run has 2",
        ),
        (
            4,
            ["params.pipeline=2", "params.data=4"],
            "params.data",
            "data 4 x pipeline 2 = 8 ranks, but the run has 4",
        ),
        (4, ["params.micro_batches=[3]"], "params.micro_batches", "must divide a replica's rows"),
        (4, ["params.micro_batches=[0]"], "params.micro_batches", "distinct counts in 1..4096"),
    ],
)
def test_bad_layouts_are_one_line_naming_the_key(runs_dir, ranks, sets, key, says):
    code, _, out, err = run_scenario(
        "train-pipeline", runs_dir, ranks=ranks, sets=[*TINY, *sets], timeout_s=25
    )
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0] and says in lines[0] and "Traceback" not in err, err


def stage_fault(runs_dir, action: str) -> tuple:
    proc = launch(
        ["run", "train-pipeline", "--ranks", "4", "--out", str(runs_dir)]
        + [a for s in TINY for a in ("--set", s)]
        + ["--set", "params.micro_batches=[4]", "--set", "params.schedule=[1f1b]", "--set", "params.steps=2"]
        + ["--set", "fault.rank=2", "--set", f"fault.action={action}", "--set", "fault.after_ops=18"]
        + ["--set", "timeout_s=3"]
    )
    return proc, *finish(proc, timeout_s=40)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action,cause", [("kill", "killed by SIGKILL"), ("hang", "unresponsive")])
def test_a_killed_or_hung_stage_is_named_with_the_micro_batch_its_neighbours_waited_for(
    runs_dir, action, cause
):
    """Stage 2 of 4 (rank 2) fails in the middle of its first step's schedule: the root cause is
    rank 2; stages 1 and 3, which wait on it, say which micro-batch they were waiting for."""
    proc, out, err, leftovers = stage_fault(runs_dir, action)
    assert proc.returncode == 1 and not leftovers, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 2" in root and cause in root, err
    waited = " ".join(err.split())
    assert "(in pipeline stage 1: gradient of micro-batch" in waited and "from stage 2" in waited, err
    assert "(in pipeline stage 3: activation of micro-batch" in waited, err


@pytest.mark.timeout(120)
def test_torch_pipelining_loses_the_same(runs_dir, one_process):
    """torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over Gloo on the same weights,
    batches and stages. Measured: the losses agree to the last bit over these 3 steps."""
    need(importable("torch"), NO_TORCH)
    sets = [*TINY, "params.pipeline=2", "params.micro_batches=[2,4]", "params.baseline=pipelining"]
    code, result, out, err = run_scenario("train-pipeline", runs_dir, ranks=2, sets=sets, timeout_s=110)
    assert code == 0, out + err
    rows = result["torch"]
    assert [(r["schedule"], r["m"]) for r in rows] == [("gpipe", 2), ("gpipe", 4), ("1f1b", 2), ("1f1b", 4)]
    for row in rows:
        assert row["loss_gap"] <= 1e-12 and row["loss_torch"] == pytest.approx(one_process[-1], rel=1e-12)
        assert row["step_torch_ms"] > 0 and row["step_ours_ms"] > 0
    records = (runs_dir / "latest" / "pipelining" / "rank-1.jsonl").read_text().splitlines()
    assert len(records) == 4 * STEPS  # the last stage's record of every step of every run


@pytest.mark.timeout(30)
def test_torch_refuses_1f1b_with_fewer_micro_batches_than_stages_and_ours_says_so(runs_dir):
    sets = [*TINY, "params.pipeline=4", "params.micro_batches=[2,4]", "params.baseline=pipelining"]
    code, _, out, err = run_scenario("train-pipeline", runs_dir, ranks=4, sets=sets, timeout_s=25)
    assert code == 2 and "params.micro_batches" in err and "Schedule1F1B needs at least p = 4" in err, err
