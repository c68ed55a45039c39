"""Expert parallelism equal to one process: grids of in-process ranks (2 and 4 ranks, expert groups of
2 and 4, dropless and with capacity, in the training lab's modes), then real launched runs of
`run train-moe` on 2 and 4 ranks (float64), which must route and drop exactly the assignments one
process does; bad configurations are one line naming the key, exit 2; a killed rank is the root
cause, named by the all-to-all its peer waited in, and leaves nothing behind."""

import json

import numpy as np
import pytest
from test_failures import finish, launch

from playground.cli.testing import run_scenario
from playground.comm.world import run_local
from playground.commands import moe_results
from playground.config.scenario import load_scenario
from playground.core.errors import ScenarioError
from playground.training.experts.grid import ExpertGrid
from playground.training.experts.loop import one_process_moe, train_experts
from playground.training.experts.workloads import WORKLOADS
from playground.training.loop import LOSS_TOLERANCE, TOLERANCE
from playground.training.modes import BY_NAME
from playground.training.step import TrainSetup
from playground.transformer import AdamConfig, BatchSampler, ModelConfig, lecture_bytes
from playground.transformer.moe import MoEConfig

CONFIG = ModelConfig(layers=2, d_model=16, heads=2, context=16, dtype="float64")
SETUP = TrainSetup(CONFIG, AdamConfig(lr=5e-3), 0, 8 * 16, 25 << 20, 1 << 20)
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, 8, seed=0)
STEPS = 3
TINY = [
    "params.layers=2",
    "params.d_model=16",
    "params.heads=2",
    "params.context=16",
    "params.batch=8",
    "params.steps=2",
    "params.experts=4",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "ranks,group,capacity_factor,mode,workload",
    [
        (2, 2, None, "bucketed", "learned"),
        (4, 2, 1.0, "zero1", "hot_expert"),
        (4, 4, 0.5, "per_tensor", "moving"),
        (4, 2, None, "zero2", "learned"),  # the units reduce-scattered over the replicas
        (4, 2, 1.0, "zero3", "hot_expert"),  # and a block's experts gathered with its other unit
    ],
)
def test_expert_grids_equal_one_process_and_drop_the_same_assignments(
    ranks, group, capacity_factor, mode, workload
):
    moe = MoEConfig(experts=4, top_k=2, capacity_factor=capacity_factor)
    reference = one_process_moe(SETUP, SAMPLER, STEPS, moe, WORKLOADS[workload], group)

    def body(comm):
        grid = ExpertGrid(comm, group)
        return train_experts(comm, grid, BY_NAME[mode], SETUP, SAMPLER, STEPS, moe, WORKLOADS[workload], "sorted",
                             reference=reference)  # fmt: skip

    results = run_local(ranks, body, timeout_s=50)
    for res in results:
        assert res["reference"]["param_gap"] <= TOLERANCE["float64"], res["reference"]
        assert res["reference"]["loss_gap"] <= LOSS_TOLERANCE["float64"]
    for step, ref in enumerate(reference.loads):
        for key in ("routed", "kept"):
            assert np.sum([r["steps"][step][key] for r in results], axis=0).tolist() == ref[key]
        rows = sum(sum(r["steps"][step]["received"]) for r in results)
        assert rows == np.sum(ref["kept"])  # every kept assignment computed once, on its expert's rank
    dropped = np.sum(reference.loads[-1]["routed"]) - np.sum(reference.loads[-1]["kept"])
    assert (dropped > 0) == (capacity_factor is not None)
    assert results[0]["plan"].endswith(f"experts 0-{4 // group - 1} of 4")


def _figures(result: dict) -> dict:
    return {(r["workload"], r["permute"]): r for r in result["runs"]}


@pytest.mark.timeout(90)
def test_a_run_on_2_ranks_dropless_equals_one_process_both_permutations(runs_dir):
    sets = [*TINY, "params.workloads=[balanced,hot_rank]", "params.permutes=[sorted,gathered]"]
    code, result, out, err = run_scenario("train-moe", runs_dir, ranks=2, sets=sets, timeout_s=80)
    assert code == 0, out + err
    runs = _figures(result)
    assert set(runs) == {(w, p) for w in ("balanced", "hot_rank") for p in ("sorted", "gathered")}
    for row in runs.values():
        assert row["param_gap"] <= TOLERANCE["float64"] and row["loss_gap"] <= LOSS_TOLERANCE["float64"]
        assert row["step_ms"] > 0 and row["alltoall_ms"] > 0 and row["experts_ms"] >= 0
    loads = {r["workload"]: r for r in result["loads"]}
    assert loads["balanced"]["per_expert"] == "128 128 128 128" and loads["balanced"]["expert_imbalance"] == 1
    assert loads["hot_rank"]["per_rank"] == "512 0" and loads["hot_rank"]["rank_imbalance"] == 2
    assert all(r["same_routing"] == "yes" and r["drop_pct"] == 0 for r in loads.values())
    assert [r["workload"] for r in result["permute"]] == ["balanced", "hot_rank"]
    assert (runs_dir / "latest" / "moe-steps.png").stat().st_size > 0
    assert "the permutation both ways" in " ".join(out.split())
    page = _results_page(result)
    assert "| balanced | 128 128 128 128 | 256 256 | 1.00 | 1.00 | 0.0 | yes |" in page
    assert "| hot_rank | gathered | " in page and "routed and dropped exactly one process's" in page


class _Context:
    """`results.Context` for the moe section, its runs answered with one run's result (no calibrate)."""

    def __init__(self, work, result: dict):
        self.work, self.quick, self.rounds, self.result = work, True, 1, result

    def run(self, *args, timeout_s=0):
        assert args[0] in ("calibrate", "run")

    def latest(self, runs):
        runs.mkdir(parents=True, exist_ok=True)
        (runs / "result.json").write_text(json.dumps(self.result))
        return runs


def _results_page(result: dict) -> str:
    """The body of `results --sections moe` built from `result` for both of its runs."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as work:
        return moe_results.moe(_Context(Path(work), result))


@pytest.mark.timeout(90)
def test_a_2x2_grid_with_a_capacity_factor_drops_what_one_process_drops(runs_dir):
    sets = [*TINY, "params.expert_parallel=2", "params.capacity_factor=1.0", "params.workloads=[hot_expert]"]
    sets += ["params.permutes=[gathered]", "params.mode=after_backward"]
    code, result, out, err = run_scenario("train-moe", runs_dir, ranks=4, sets=sets, timeout_s=80)
    assert code == 0, out + err
    (load,) = result["loads"]
    assert load["same_routing"] == "yes" and load["drop_pct"] > 0
    # expert 0 takes every first choice but only ceil(1.0 x 16 x 2 / 4) = 8 a sequence: 8 x 8 x 2 blocks
    assert load["per_expert"].split()[0] == "128"
    (row,) = result["runs"]
    assert row["param_gap"] <= TOLERANCE["float64"]
    assert "2 x 2 (replicas x expert group)" in " ".join(out.split())


BAD = [
    (2, ["params.capacity_factor=0"], "params.capacity_factor", "must be > 0"),
    (2, ["params.capacity_factor=-1.5"], "params.capacity_factor", "must be > 0"),
    (2, ["params.experts=32"], "params.experts", "32 experts are more than the 16 tokens"),
    (3, [], "--ranks", "3 expert-parallel ranks must divide the 4 experts"),
    (4, ["params.expert_parallel=3"], "params.expert_parallel", "must divide the 4 experts"),
    (
        4,
        ["params.expert_parallel=8", "params.experts=8"],
        "params.expert_parallel",
        "must divide the run's 4",
    ),
    (4, ["params.batch=6"], "params.batch", "4 ranks each train their own rows"),
]


@pytest.mark.parametrize("ranks,sets,key,says", BAD)
def test_bad_configurations_name_the_key_before_any_process_starts(ranks, sets, key, says):
    with pytest.raises(ScenarioError) as e:
        load_scenario("train-moe", ranks=ranks, overrides=[*TINY, *sets])
    assert key in str(e.value) and says in str(e.value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ranks,sets,key,says", [BAD[0], BAD[2]])
def test_bad_configurations_are_one_line_naming_the_key_exit_2(runs_dir, ranks, sets, key, says):
    code, _, out, err = run_scenario("train-moe", runs_dir, ranks=ranks, sets=[*TINY, *sets], timeout_s=25)
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0] and says in lines[0] and "Traceback" not in err, err


@pytest.mark.timeout(60)
def test_a_killed_rank_is_the_root_cause_and_its_peer_names_the_all_to_all(runs_dir):
    proc = launch(
        ["run", "train-moe", "--ranks", "2", "--out", str(runs_dir)]
        + [a for s in [*TINY, "params.reference=false", "params.workloads=[balanced]"] for a in ("--set", s)]
        + ["--set", "fault.rank=1", "--set", "fault.action=kill", "--set", "fault.after_ops=12"]
        + ["--set", "timeout_s=3"]
    )
    out, err, leftovers = finish(proc, timeout_s=40)
    assert proc.returncode == 1 and not leftovers, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and "killed by SIGKILL" in root, err
    assert "rank 0" in err and "(in alltoallv[expert0] " in " ".join(err.split()), err  # expert group 0
