"""Live recovery for real (`recovery.way: peer`): a rank SIGKILLed (or raising) mid-training is
started again alone while the survivors keep their processes, re-form the group and copy their
state to it; no checkpoint is read, and every rank ends with the parameters of a run without the
fault, bit for bit (float64), in the replicated modes. With `recovery.way: shrink` the survivors go
on as fewer ranks, and end within rounding of the run without the fault. The launches run in this process (fork), as
the command line's do; the command line's own runs check exit status, result.json and leftovers."""

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from test_failures import finish, launch
from test_recovery_run import TRAIN, final_params, launched, set_args, trained
from tools import owned_scratch

from playground.checkpoint import store
from playground.cli.testing import run_cli, session_processes
from playground.transformer import load_model

STEPS = ["params.steps=6"]
# (the mode's keys, rank 1's post the kill fires on: about 75% into the run, as in test_recovery_run)
CASES = {
    "per_tensor": (["params.mode=[per_tensor]"], 154),
    "bucketed": (["params.mode=[bucketed]", "params.first_bucket_mb=0.001"], 46),
    "after_backward": (["params.mode=[after_backward]"], 19),
}
PEER = ["recovery.way=peer", "recovery.max_restarts=1"]


def with_and_without(sets: list[str], fault: list[str], tmp_path: Path, ranks: int = 2) -> tuple:
    """`train` with `sets` run clean and then with `fault` too: (clean, faulty, faulty's lines)."""
    clean, _ = launched("train", sets, tmp_path / "clean", ranks=ranks)
    faulty, said = launched("train", [*sets, *fault], tmp_path / "faulty", ranks=ranks)
    return clean, faulty, said


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES)
def test_a_rank_killed_mid_training_is_replaced_live_and_ends_bit_for_bit_as_without_the_fault(
    tmp_path, case
):
    keys, post = CASES[case]
    sets = [*TRAIN, *keys, *STEPS]
    fault = ["fault.action=kill", "fault.rank=1", f"fault.after_ops={post}", *PEER]
    clean, faulty, said = with_and_without(sets, fault, tmp_path)
    assert clean.ok and faulty.ok, faulty.failures
    [recovery] = faulty.restarts
    assert recovery["way"] == "peer" and recovery["rank"] == 1 and "killed by SIGKILL" in recovery["why"]
    assert recovery["replaced"] == [1] and recovery["source_rank"] == 0, recovery
    assert recovery["checkpoint_step"] is None and recovery["steps_redone"] in (0, 1), recovery
    assert 0 < recovery["step_from"] < 6, recovery
    for phase in ("detection_s", "restart_s", "load_s", "warmup_s"):
        assert recovery[phase] is not None and recovery[phase] >= 0, (phase, recovery)
    assert any("recovery 1/1 (peer)" in line for line in said), said
    for r in range(2):
        assert trained(faulty.results[r]) == trained(clean.results[r])  # every step's loss, the final hash
    assert not store.candidates(store.checkpoints_dir(tmp_path / "faulty"))  # none written, none read


@pytest.mark.timeout(60)
def test_a_rank_that_raises_is_replaced_live_too(tmp_path):
    sets = [*TRAIN, *CASES["bucketed"][0], *STEPS]
    clean, faulty, _ = with_and_without(
        sets, ["fault.action=raise", "fault.rank=0", "fault.after_ops=30", *PEER], tmp_path
    )
    assert faulty.ok, faulty.failures
    [recovery] = faulty.restarts
    assert recovery["way"] == "peer" and recovery["rank"] == 0 and "FaultInjected" in recovery["why"]
    assert recovery["replaced"] == [0] and recovery["source_rank"] == 1, recovery
    assert [trained(r) for r in faulty.results] == [trained(r) for r in clean.results]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("way", ["peer", "shrink"])
def test_the_command_line_records_the_live_recovery_and_leaves_nothing_behind(runs_dir, way):
    """Exit 0, result.json's recovery section says the way, the report's Restarts table has it; no
    process, scratch directory or /dev/shm file of the run is left."""
    sets = [*TRAIN, *CASES["bucketed"][0], *STEPS, "fault.action=kill", "fault.rank=1", "fault.after_ops=46"]
    proc = launch(
        [
            "run",
            "train",
            "--out",
            str(runs_dir),
            "--max-restarts",
            "1",
            *set_args([*sets, f"recovery.way={way}"]),
        ]
    )
    out, err, leftovers = finish(proc, timeout_s=80)
    assert proc.returncode == 0, out + err
    assert not leftovers and owned_scratch(proc.pid) == []
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    [recovery] = result["recovery"]["restarts"]
    assert recovery["way"] == way and recovery["checkpoint_step"] is None
    assert len(result["rank_results"]) == (2 if way == "peer" else 1)
    report = out + err
    assert "Restarts" in report and f"restart 1 ({way}): rank 1" in " ".join(report.split())


@pytest.mark.timeout(60)
def test_a_run_that_uses_up_its_live_recoveries_exits_1_naming_every_failure(tmp_path):
    """The mtbf drill kills a rank every 0.3 s on average in a run of 100,000 steps: one live
    recovery, then the second failure ends the run."""
    from playground.config.scenario import load_scenario
    from playground.display.report import make_console
    from playground.launcher.run import execute

    sets = [*TRAIN, *CASES["bucketed"][0], "params.steps=100000", *PEER, "recovery.mtbf_s=0.3"]
    finished = execute(load_scenario("train", ranks=2, overrides=sets), tmp_path, make_console())
    assert finished.code == 1
    result = finished.result
    [recovery] = result["recovery"]["restarts"]
    assert recovery["way"] == "peer" and "killed by SIGKILL" in recovery["why"]
    assert result["failures"][0] == f"before restart 1: {recovery['why']}"
    assert "killed by SIGKILL" in result["failures"][1]
    # the survivor, already re-forming when the launcher said no, was told at once (a final abort)
    assert not any("unresponsive" in f for f in result["failures"]), result["failures"]


@pytest.mark.timeout(60)
def test_ctrl_c_during_a_peer_run_leaves_nothing_behind(runs_dir):
    sets = [*TRAIN, *CASES["bucketed"][0], "params.steps=100000", "recovery.way=peer", "recovery.mtbf_s=1"]
    proc = launch(["run", "train", "--out", str(runs_dir), "--max-restarts", "100", *set_args(sets)])
    deadline = time.monotonic() + 30
    while not (runs_dir / "latest" / "failures.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the drill's first kill (a live recovery), not papering over a race
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    out, err, leftovers = finish(proc, timeout_s=20)
    assert proc.returncode == 130, out + err
    assert not leftovers and owned_scratch(proc.pid) == []
    assert not session_processes(proc.pid)


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["recovery.way=sideways"], "recovery.way=sideways: expected one of 'restart', 'peer', 'shrink'"),
        (["recovery.way=peer", "params.mode=[zero1]"], "peer needs params.mode to be one of per_tensor"),
        (
            ["recovery.way=shrink", "params.checkpoint_every=5"],
            "shrink needs params.checkpoint_every=0",
        ),
    ],
)
def test_a_recovery_way_the_run_cannot_take_is_one_line_exit_2(sets, says):
    done = run_cli(["run", "train", *set_args(sets)])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says in done.stderr


def test_a_node_without_live_recovery_refuses_peer_in_one_line():
    done = run_cli(["run", "train-pipeline", "--set", "recovery.way=peer"])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "recovery.way=peer: this node cannot recover live (peer); allowed: restart" in done.stderr


@pytest.mark.timeout(60)
def test_checkpoints_go_on_through_a_live_recovery(tmp_path):
    """With checkpoints every step, the one in flight when rank 1 dies is given up (rank 0 stops
    waiting for its part) rather than stalling the re-formed group for the commit timeout; the run's
    last checkpoint is whole and holds the fault-free parameters."""
    sets = [*TRAIN, *CASES["bucketed"][0], *STEPS, "params.checkpoint_every=1"]
    fault = ["fault.action=kill", "fault.rank=1", "fault.after_ops=46", *PEER]
    clean, faulty, _ = with_and_without(sets, fault, tmp_path)
    assert faulty.ok, faulty.failures
    [recovery] = faulty.restarts
    assert recovery["way"] == "peer" and recovery["total_s"] < 10, recovery
    assert [trained(r) for r in faulty.results] == [trained(r) for r in clean.results]
    for got, want in zip(final_params(tmp_path / "faulty"), final_params(tmp_path / "clean"), strict=True):
        assert np.array_equal(got, want)


def final_weights(run_dir: Path) -> np.ndarray:
    return load_model(run_dir / "model.npz")[1]


# (ranks, global batch, the mode's keys, the rank killed, its post): some survivors then take two row-blocks
SHRINK_CASES = {
    "3 to 2, bucketed": (3, 6, CASES["bucketed"][0], 1, 60),
    "4 to 3, per_tensor, rank 0, micro-batches": (
        4,
        8,
        ["params.mode=[per_tensor]", "params.micro_batches=2"],
        0,
        40,
    ),
    "4 to 3, after_backward": (4, 8, CASES["after_backward"][0], 3, 30),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", SHRINK_CASES)
def test_a_group_that_shrinks_ends_within_rounding_of_the_run_without_the_fault(tmp_path, case):
    """No replacement: the survivors renumber and share the global batch's N row-blocks out over
    N-1 ranks; the sums are added in another order, so the parameters agree to rounding (measured
    within 8e-16 of the largest after 8 steps; the bound leaves room for Adam to carry it)."""
    ranks, batch, keys, rank, post = SHRINK_CASES[case]
    sets = [*TRAIN, *keys, "params.steps=8", f"params.batch={batch}"]
    fault = ["fault.action=kill", f"fault.rank={rank}", f"fault.after_ops={post}", "recovery.way=shrink"]
    clean, shrunk, said = with_and_without(sets, [*fault, "recovery.max_restarts=1"], tmp_path, ranks)
    assert clean.ok and shrunk.ok, shrunk.failures
    assert len(shrunk.results) == ranks - 1
    [recovery] = shrunk.restarts
    assert recovery["way"] == "shrink" and recovery["rank"] == rank and recovery["replaced"] == [rank]
    assert recovery["checkpoint_step"] is None and recovery["steps_redone"] in (0, 1), recovery
    assert any("goes on without rank" in line for line in said), said
    want, got = final_weights(tmp_path / "clean"), final_weights(tmp_path / "faulty")
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    losses = [s["loss"] for s in shrunk.results[0]["modes"][0]["steps"]]
    for a, b in zip(losses, [s["loss"] for s in clean.results[0]["modes"][0]["steps"]], strict=True):
        assert abs(a - b) <= 1e-12 * abs(b)
    assert sorted(p.name for p in (tmp_path / "faulty").glob("rank-*.jsonl")) == [
        f"rank-{r}.jsonl" for r in range(ranks - 1)
    ]  # the survivors' logs under their new ranks, the lost rank's kept aside


@pytest.mark.timeout(60)
def test_a_hung_rank_falls_back_to_a_restart_from_the_checkpoint(tmp_path):
    """A hang kills nothing: its peer times out waiting (timeout_s 3 s), and only the abort's
    settling can say who was silent, so the group is stopped and restarted from its checkpoint."""
    sets = [*TRAIN, *CASES["bucketed"][0], *STEPS, "params.checkpoint_every=2", "timeout_s=3"]
    clean, faulty, _ = with_and_without(
        sets, ["fault.action=hang", "fault.rank=1", "fault.after_ops=46", *PEER], tmp_path
    )
    assert faulty.ok, faulty.failures
    [restart] = faulty.restarts
    assert restart["way"] == "restart" and restart["rank"] == 1 and "unresponsive" in restart["why"], restart
    assert restart["checkpoint_step"] is not None
    assert [trained(r) for r in faulty.results] == [trained(r) for r in clean.results]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("way", ["peer", "shrink"])
def test_a_run_that_fails_after_live_recoveries_exits_1_and_leaves_nothing_behind(runs_dir, way):
    """The drill strikes every 0.3 s on average, one recovery is allowed: the command exits 1 naming
    both failures, and no process, scratch directory or /dev/shm file of any generation is left."""
    sets = [*TRAIN, *CASES["bucketed"][0], "params.steps=100000", "params.batch=6", f"recovery.way={way}"]
    args = ["run", "train", "--ranks", "3", "--out", str(runs_dir), "--max-restarts", "1"]
    proc = launch([*args, *set_args([*sets, "recovery.mtbf_s=0.3"])])
    out, err, leftovers = finish(proc, timeout_s=80)
    assert proc.returncode == 1, out + err
    assert not leftovers and owned_scratch(proc.pid) == []
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    assert [r["way"] for r in result["recovery"]["restarts"]] == [way]
    assert len(result["failures"]) >= 2 and "killed by SIGKILL" in result["failures"][1]
