"""Restarts for real: a rank SIGKILLed mid-training, the group started again from the newest whole
checkpoint, and the run ends as if nothing happened: every rank's parameters bit for bit those of a
run without the fault (float64), and the loss curve too, in every data-parallel mode, pipeline and
tensor parallelism. The launches run in this process (fork), as the command line's do."""

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from playground.checkpoint import store
from playground.cli.testing import run_cli, session_processes, start_cli
from playground.config.scenario import load_scenario
from playground.core import scratch
from playground.display.report import make_console
from playground.launcher.launch import Launcher
from playground.launcher.run import execute
from playground.launcher.supervise import GENERATIONS, Supervisor
from playground.transformer import load_model

TINY = ["params.layers=1", "params.d_model=16", "params.heads=2", "params.context=16", "params.batch=4"]
TRAIN = [*TINY, "params.dtype=float64", "params.sample_bytes=0", "params.bucket_cap_mb=0.005"]
RUNS = ["params.steps=6", "params.checkpoint_every=2"]
# (scenario, its --set values, rank 1's post the kill fires on: about 75% into the run, well past the
# checkpoint after step 2; its posts per run measured at 205, 61, 25, 25, 29, 33). ZeRO-1 and
# tensor parallelism write their checkpoints synchronously, the others asynchronously (the default).
CASES = {
    "per_tensor": ("train", [*TRAIN, "params.mode=[per_tensor]"], 154),
    "bucketed": ("train", [*TRAIN, "params.mode=[bucketed]", "params.first_bucket_mb=0.001"], 46),
    "after_backward": ("train", [*TRAIN, "params.mode=[after_backward]"], 19),
    "zero1": ("train", [*TRAIN, "params.mode=[zero1]", "params.checkpoint_async=false"], 19),
    "pipeline": (
        "train-pipeline",
        [
            *TINY[1:],
            "params.layers=2",
            "params.pipeline=2",
            "params.schedule=[1f1b]",
            "params.micro_batches=[2]",
            "params.calibration_repeats=1",
            "params.reference=false",
        ],
        22,
    ),
    "tensor": (
        "train-tensor",
        [*TINY, "params.tensor=[2]", "params.reference=false", "params.checkpoint_async=false"],
        25,
    ),
}


def launched(scenario: str, sets: list[str], run_dir: Path, ranks: int = 2):
    """The run's outcome, launched with a supervisor, and what the supervisor said."""
    loaded = load_scenario(scenario, ranks=ranks, overrides=sets)
    run_dir.mkdir(parents=True)
    said: list[str] = []
    outcome = Launcher(loaded, run_dir, supervisor=Supervisor(loaded, run_dir, say=said.append)).run()
    return outcome, said


def trained(result: dict) -> list[tuple[str, list[float]]]:
    """Each training run's (parameters' hash, losses) in a rank's result, whatever the node."""
    runs = result.get("modes") or result["runs"]
    return [(r["hash"], [s["loss"] for s in r["steps"]]) for r in runs]


def final_params(run_dir: Path) -> list[np.ndarray]:
    """Every rank's parameters after the last step: the checkpoint written then."""
    checkpoint, _ = store.newest_whole(store.checkpoints_dir(run_dir))
    return [checkpoint.load(r)[0]["params"] for r in range(checkpoint.world_size)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES)
def test_a_rank_killed_mid_training_restarts_and_ends_bit_for_bit_as_without_the_fault(tmp_path, case):
    scenario, sets, post = CASES[case]
    fault = ["fault.action=kill", "fault.rank=1", f"fault.after_ops={post}", "recovery.max_restarts=1"]
    clean, _ = launched(scenario, [*sets, *RUNS], tmp_path / "clean")
    faulty, said = launched(scenario, [*sets, *RUNS, *fault], tmp_path / "faulty")
    assert clean.ok and faulty.ok, faulty.failures
    [restart] = faulty.restarts
    assert restart["rank"] == 1 and "killed by SIGKILL" in restart["why"]
    assert restart["checkpoint_step"] >= 2 and restart["steps_redone"] >= 0, restart
    assert any("goes on from checkpoint step" in line for line in said)
    for r in range(2):
        assert trained(faulty.results[r]) == trained(clean.results[r])
    for got, want in zip(final_params(tmp_path / "faulty"), final_params(tmp_path / "clean"), strict=True):
        assert got.dtype == np.float64 and np.array_equal(got, want)
    assert sorted(p.name for p in (tmp_path / "faulty" / GENERATIONS / "0").iterdir()) == [
        "rank-0.jsonl",
        "rank-1.jsonl",
    ]  # the failed group's logs, kept aside


def set_args(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def owned_scratch(pid: int) -> list[Path]:
    """The scratch directories (ipc sockets, /dev/shm rings) that launcher `pid` claimed and left."""
    out = []
    for parent in scratch.scratch_parents():
        for d in Path(parent).glob("playground-*"):
            owner = d / scratch.OWNER_FILE
            if owner.exists() and owner.read_text().strip() == str(pid):
                out.append(d)
    return out


@pytest.mark.timeout(120)
def test_resume_after_the_launcher_was_sigkilled_skips_a_corrupted_checkpoint_and_ends_as_without(
    tmp_path, runs_dir
):
    """The launcher SIGKILLed mid-run (its ranks die with it); the newest checkpoint then gets one
    byte flipped; `--resume` with another rank count is refused in one line; `--resume` goes on from
    the whole one before it, and the run ends bit for bit as one never stopped, leaving nothing."""
    # 600 steps: the kill after the third checkpoint (step 30) lands mid-run on a fast machine too
    sets = [*TRAIN, "params.mode=[bucketed]", "params.steps=600", "params.checkpoint_every=10"]
    proc = start_cli(["run", "train", "--out", str(runs_dir), *set_args(sets)])

    def past_third(checkpoints) -> bool:  # a whole checkpoint of step 30 or later (older ones are swept)
        return any(
            store.step_of(p) >= 30 and (p / store.MANIFEST).exists() for p in store.candidates(checkpoints)
        )

    checkpoints = None
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if checkpoints is None and (runs_dir / "latest").exists():
            checkpoints = store.checkpoints_dir((runs_dir / "latest").resolve())
        if checkpoints is not None and past_third(checkpoints):
            break
        time.sleep(0.05)  # polling for the run to reach its third checkpoint, not papering over a race
    assert proc.poll() is None, "the run ended before the launcher could be killed mid-run"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert checkpoints is not None and past_third(checkpoints)
    deadline = time.monotonic() + 10
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the ranks die with their launcher (PR_SET_PDEATHSIG)
    assert not session_processes(proc.pid)
    run_dir = checkpoints.parent
    newest, _ = store.newest_whole(checkpoints)
    part = newest.path / "part-1.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 3] ^= 0x10
    part.write_bytes(bytes(data))

    refused = run_cli(["run", "train", "--out", str(runs_dir), "--resume", str(run_dir), "--ranks", "4"])
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "a checkpoint of another run: world_size is 2 in it, 4 in this run" in refused.stderr

    resumed = run_cli(["run", "train", "--out", str(runs_dir), "--resume", str(run_dir)], timeout_s=90)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    err = " ".join(resumed.stderr.split())
    assert f"resume: skipped {newest.path}: part-1.npz has SHA-256" in err and "(corrupted)" in err
    assert f"resuming {run_dir} from its checkpoint after step {newest.step - 10}" in err
    result = json.loads((run_dir / "result.json").read_text())
    clean, _ = launched("train", [*sets, "params.sample_bytes=0"], tmp_path / "clean")
    assert [m["losses"] for m in result["modes"]] == [
        [s["loss"] for s in m["steps"]] for m in clean.results[0]["modes"]
    ]
    assert np.array_equal(load_model(run_dir / "model.npz")[1], final_params(tmp_path / "clean")[0])
    assert not owned_scratch(proc.pid)  # the killed launcher's, swept by the next launch


@pytest.mark.timeout(60)
def test_a_run_that_uses_up_its_restarts_exits_1_naming_every_failure(tmp_path):
    """The mtbf drill kills a rank of every generation (a mean of 0.3 s between kills, a run of
    100,000 steps): one restart, then the second failure ends the run."""
    sets = [*TRAIN, "params.mode=[bucketed]", "params.steps=100000", "params.checkpoint_every=5"]
    drill = ["recovery.max_restarts=1", "recovery.mtbf_s=0.3"]
    finished = execute(load_scenario("train", ranks=2, overrides=[*sets, *drill]), tmp_path, make_console())
    assert finished.code == 1
    result = finished.result
    [restart] = result["recovery"]["restarts"]
    assert restart["generation"] == 0 and "killed by SIGKILL" in restart["why"]
    assert result["failures"][0] == f"before restart 1: {restart['why']}"
    assert "killed by SIGKILL" in result["failures"][1]
    assert [e["event"].split(" (")[0] for e in result["events"]] == [
        f"rank {result['failures'][1].split()[1]} SIGKILLed by the mtbf drill"
    ]  # the last generation's drill
