"""Real multi-process runs of `run train-tensor`: t = 1, 2 (2 ranks) and 1, 2, 4 (4 ranks) equal one
process in float64 at every step; a 2 x 2 data x tensor grid in the training lab's modes;
torch.distributed.tensor.parallel agrees; bad layouts are one line and exit 2; a killed or hung
shard fails the run naming it and the layer its peers waited in, and leaves nothing behind."""

import pytest
from test_failures import finish, launch
from tools import NO_TORCH, importable, need

from playground.cli.testing import run_scenario
from playground.transformer import AdamConfig, BatchSampler, ModelConfig, lecture_bytes
from playground.transformer.train import train_one_process

CONFIG = ModelConfig(layers=2, d_model=16, heads=4, context=16, dtype="float64")
BATCH, STEPS, LR = 8, 3, 5e-3
TINY = [
    "params.layers=2",
    "params.d_model=16",
    "params.heads=4",
    "params.context=16",
    f"params.batch={BATCH}",
    f"params.steps={STEPS}",
    f"params.lr={LR}",
]
# Measured: parameters within 1e-15 to 1e-13 of the largest after 3 steps, losses within 4e-16;
# the tolerance leaves room for other BLAS builds' summation orders.
PARAM_TOLERANCE, LOSS_TOLERANCE = 1e-12, 1e-13


@pytest.fixture(scope="module")
def one_process() -> list[float]:
    sampler = BatchSampler(lecture_bytes(), CONFIG.context, BATCH, seed=0)
    _, losses = train_one_process(CONFIG, sampler, STEPS, adam=AdamConfig(lr=LR), seed=0)
    return losses


def check_runs(result: dict, one_process: list[float], ranks: int, sizes: list[int]) -> None:
    assert [r["t"] for r in result["runs"]] == sizes
    for run in result["runs"]:
        assert run["grid"] == f"{ranks // run['t']} x {run['t']}"
        assert run["param_gap"] <= PARAM_TOLERANCE, run
        assert run["losses"] == pytest.approx(one_process, rel=LOSS_TOLERANCE)
        assert run["tensor_calls"] == (0 if run["t"] == 1 else 4 * CONFIG.layers), run


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ranks,sizes", [(2, [1, 2]), (4, [1, 2, 4])])
def test_every_t_equals_one_process(runs_dir, one_process, ranks, sizes):
    code, result, out, err = run_scenario("train-tensor", runs_dir, ranks=ranks, sets=TINY, timeout_s=80)
    assert code == 0, out + err
    check_runs(result, one_process, ranks, sizes)
    assert (
        result["plans"][-1][-1]
        == f"stage 0: blocks 0-1 + embeddings + head, shard {sizes[-1] - 1} of {sizes[-1]}"
    )
    assert (runs_dir / "latest" / "tensor-steps.png").stat().st_size > 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["per_tensor", "zero1"])
def test_a_2x2_data_x_tensor_grid_in_the_training_labs_modes(runs_dir, one_process, mode):
    """4 ranks, 2 replicas x 2 shards: each shard's gradients reduced over its data group (one
    all-reduce per tensor on the communication thread; ZeRO-1's reduce-scatter, Adam on a shard of
    the shard, all-gather), the shards' replicated parameters checked bit-identical every step."""
    sets = [*TINY, "params.tensor=[2]", f"params.mode={mode}"]
    code, result, out, err = run_scenario("train-tensor", runs_dir, ranks=4, sets=sets, timeout_s=80)
    assert code == 0, out + err
    check_runs(result, one_process, 4, [2])
    assert f"mode {mode} over the data group" in " ".join(out.split())


@pytest.mark.timeout(120)
def test_torch_tensor_parallel_loses_the_same(runs_dir, one_process):
    """torch.distributed.tensor.parallel (ColwiseParallel / RowwiseParallel on DTensor) over Gloo,
    the same weights, batches and grids. Measured: the losses agree within 4e-16."""
    need(importable("torch"), NO_TORCH)
    sets = [*TINY, "params.baseline=tensor_parallel"]
    code, result, out, err = run_scenario("train-tensor", runs_dir, ranks=2, sets=sets, timeout_s=110)
    assert code == 0, out + err
    rows = result["torch"]
    assert [r["t"] for r in rows] == [1, 2]
    for row in rows:
        assert row["loss_gap"] <= 1e-12 and row["loss_torch"] == pytest.approx(one_process[-1], rel=1e-12)
        assert row["step_torch_ms"] > 0 and row["step_ours_ms"] > 0
    records = (runs_dir / "latest" / "tensor_parallel" / "rank-1.jsonl").read_text().splitlines()
    assert len(records) == 2 * STEPS


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "ranks,sets,key,says",
    [
        (2, ["params.tensor=[3]"], "params.tensor", "t = 3 ranks must divide the model's 4 attention heads"),
        (2, ["params.tensor=[4]"], "params.tensor", "a grid of 4 ranks is larger than the run's 2"),
        (4, ["params.tensor=[2]", "params.batch=3"], "params.batch", "2 data-parallel replicas"),
        (2, ["params.tensor=[]"], "params.tensor", "a non-empty list"),
    ],
)
def test_bad_layouts_are_one_line_naming_the_key(runs_dir, ranks, sets, key, says):
    code, _, out, err = run_scenario("train-tensor", runs_dir, ranks=ranks, sets=[*TINY, *sets], timeout_s=25)
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0] and says in lines[0] and "Traceback" not in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action,cause", [("kill", "killed by SIGKILL"), ("hang", "unresponsive")])
def test_a_killed_or_hung_shard_is_named_with_the_layer_its_peer_waited_in(runs_dir, action, cause):
    """Shard 1 of replica 0 (rank 1) fails in the middle of a step at t = 2: the root cause is rank
    1; shard 0, which waits on it inside a block's all-reduce, says which."""
    proc = launch(
        ["run", "train-tensor", "--ranks", "4", "--out", str(runs_dir)]
        + [a for s in [*TINY, "params.tensor=[2]", "params.reference=false"] for a in ("--set", s)]
        + ["--set", "fault.rank=1", "--set", f"fault.action={action}", "--set", "fault.after_ops=8"]
        + ["--set", "timeout_s=3"]
    )
    out, err, leftovers = finish(proc, timeout_s=40)
    assert proc.returncode == 1 and not leftovers, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and cause in root, err
    waited = " ".join(err.split())
    assert "rank 0" in waited and " allreduce[tensor] " in waited and "(in h." in waited, err
