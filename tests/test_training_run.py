"""Real multi-process runs of `run train` and `run train-modes`: the tables, the saved model, the
sample, the plot, the trace; failures with their root cause; Ctrl-C; bad input in one line; the
same node under mpiexec and across emulated hosts."""

import json
import os
import signal
import time

import pytest
import yaml
from test_external import clean_env, ranks  # noqa: F401 - ranks is a fixture
from test_launchers import MPIEXEC, NO_MPICH
from tools import need

from nodes.train import Params
from playground import cli
from playground.cli.testing import PLAYGROUND, run_cli, run_scenario, session_processes, start_cli
from playground.comm.addresses import free_tcp_port
from playground.config.scenario import find_scenario_file
from playground.training.modes import BY_NAME
from playground.transformer import ModelConfig, lecture_bytes, load_model

TINY = [
    "params.layers=1",
    "params.d_model=16",
    "params.heads=2",
    "params.context=16",
    "params.batch=4",
    "params.steps=3",
    "params.sample_bytes=20",
    "params.bucket_cap_mb=0.005",
    "params.first_bucket_mb=0.001",
]
TINY_CONFIG = ModelConfig(layers=1, d_model=16, heads=2, context=16)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    code, result, out, err = run_scenario("train-modes", runs, ranks=2, sets=TINY, timeout_s=60)
    return code, result, out, err, runs / "latest"


def test_the_default_run_trains_ddps_mode_long_enough_to_write_lecture_text():
    """The settings `run train` uses validate, and are the ones chosen (docs/training.md): one
    mode, DDP's; a schedule; a prompt from the lecture; greedy."""
    raw = yaml.safe_load(find_scenario_file("train").read_text())
    params = Params(**{**raw["params"], "mode": tuple(BY_NAME[m] for m in raw["params"]["mode"])})
    assert raw["ranks"] == 2 and params.mode == (BY_NAME["bucketed"],)
    assert params.steps >= 1000 and params.warmup_steps > 0 and 0 < params.min_lr < params.lr
    assert params.schedule.lr_at(params.steps - 1) == pytest.approx(params.min_lr)
    assert params.prompt.encode() in bytes(lecture_bytes())
    assert params.temperature == 0 and params.sample_bytes > 0
    modes = yaml.safe_load(find_scenario_file("train-modes").read_text())["params"]["mode"]
    assert modes == ["per_tensor", "bucketed", "after_backward", "zero1", "zero2", "zero3"]


@pytest.mark.timeout(60)
def test_the_default_run_names_its_plot_and_prints_its_sample_as_text(runs_dir):
    """`run train` as a user types it, a few steps: the output names the plot and shows the sample
    decoded (whole characters), with how lecture-like it is."""
    args = [
        "run",
        "train",
        "--out",
        str(runs_dir),
        "--set",
        "params.steps=4",
        "--set",
        "params.sample_bytes=31",
    ]
    proc = run_cli(args, timeout_s=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())  # rich wraps long lines
    run_dir = (runs_dir / "latest").resolve()
    assert f"loss plot: {run_dir / 'loss.png'} (the loss of every step)" in out
    assert (run_dir / "loss.png").stat().st_size > 0
    result = json.loads((run_dir / "result.json").read_text())
    assert [m["mode"] for m in result["modes"]] == ["bucketed"] and result["ranks"] == 2
    sample, likeness = result["sample"], result["sample_likeness"]
    assert (
        "sample: 31 bytes written by rank 0 after training, greedily" in out
        and "after the prompt '分页'" in out
    )
    assert "".join(repr(sample).split()) in "".join(out.split())  # as printed, wherever rich wrapped it
    assert likeness["num_bytes"] <= 31  # cut at the last whole character
    assert not any("\udc80" <= ch <= "\udcff" for ch in sample)  # invalid bytes are shown as U+FFFD
    assert 0 <= likeness["valid_utf8"] <= 1
    assert "of its bytes valid UTF-8" in out and "not yet lecture-like" in out  # 4 steps learn no text


@pytest.mark.timeout(60)
def test_ctrl_c_during_training_exits_130_and_leaves_nothing(runs_dir, tmp_path):
    """No process, and no socket: the run's ipc directory is one of ours, so that other runs on
    the machine cannot make the check fail."""
    ipc = tmp_path / "ipc"
    args = ["run", "train", "--out", str(runs_dir), "--set", "params.steps=100000"]
    proc = start_cli(args, {"PLAYGROUND_IPC_DIR": str(ipc)})
    deadline = time.monotonic() + 40
    trace = None
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(runs_dir.glob("*-train/rank-1.jsonl"))
        if logs and "backward.h.0" in logs[0].read_text():  # rank 1 is training
            trace = logs[0]
            break
        time.sleep(0.1)  # polling for the ranks to start training, not papering over a race
    assert trace is not None, "the ranks never started training"
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        leftovers = session_processes(proc.pid)
        for p in leftovers:
            p.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "root cause" not in err
    assert not leftovers
    assert not ipc.exists()


@pytest.mark.timeout(60)
def test_every_mode_trains_and_reports(tiny_run):
    code, result, out, err, run_dir = tiny_run
    assert code == 0, out + err
    modes = [m["mode"] for m in result["modes"]]
    assert modes == ["per_tensor", "bucketed", "after_backward", "zero1", "zero2", "zero3"]
    steps = result["tables"][0]["rows"]
    assert [r["mode"] for r in steps] == modes
    for row, mode in zip(steps, result["modes"], strict=True):
        assert row["loss_last"] < row["loss_first"]  # three steps of Adam already lower the loss
        assert row["tokens_per_s"] > 0 and 0 <= row["overlap_pct"] <= 100
        assert mode["losses"][0] == pytest.approx(5.545, abs=0.03)  # about uniform over 256 bytes: ln 256
    curves = [m["losses"] for m in result["modes"]]
    assert all(c == pytest.approx(curves[0], rel=1e-5) for c in curves)  # the same update in every mode
    memory = {r["mode"]: r for r in result["tables"][2]["rows"]}
    assert memory["zero1"]["states_ratio"] == 0.5 and memory["bucketed"]["states_ratio"] == 1.0
    assert f"data-parallel training, 2 ranks, {TINY_CONFIG.num_params:,} parameters" in " ".join(out.split())
    saved = yaml.safe_load((run_dir / "scenario.yaml").read_text())["params"]["mode"]
    assert saved == modes  # each Mode written back as its name


@pytest.mark.timeout(60)
def test_one_rank_trains_in_buckets_with_nothing_to_reduce(runs_dir):
    """The results' scaling row at 1 rank: buckets, but no collective for the model to price."""
    sets = [*TINY, "params.mode=[bucketed]", "params.sample_bytes=0"]
    code, result, out, err = run_scenario("train-modes", runs_dir, ranks=1, sets=sets, timeout_s=60)
    assert code == 0, out + err
    (row,) = result["step_model"]
    assert row["mode"] == "bucketed" and row["exposed_model_ms"] == 0 and row["comm_model_ms"] == 0


@pytest.mark.timeout(60)
def test_the_model_is_saved_and_a_sample_printed(tiny_run):
    code, result, out, err, run_dir = tiny_run
    assert code == 0, out + err
    config, params = load_model(run_dir / "model.npz", expect=TINY_CONFIG)
    assert config == TINY_CONFIG and params.size == TINY_CONFIG.num_params
    assert any(
        n.startswith("sample: 20 bytes written by rank 0 after training, greedily") for n in result["notes"]
    )
    assert "loss.png" in result["files"] and (run_dir / "loss.png").stat().st_size > 0


@pytest.mark.timeout(60)
def test_the_trace_shows_backward_on_the_main_thread_and_buckets_on_the_communication_thread(
    tiny_run, tmp_path
):
    code, _, out, err, run_dir = tiny_run
    assert code == 0, out + err
    trace_file = tmp_path / "t.json"
    shown = run_cli(["inspect", str(run_dir), "--trace", str(trace_file)])
    assert shown.returncode == 0, shown.stderr
    events = [e for e in json.loads(trace_file.read_text())["traceEvents"] if e.get("ph") == "X"]
    for mode in ("per_tensor", "bucketed"):
        backward = [
            e for e in events if e["name"].startswith("backward.h.") and e["args"].get("mode") == mode
        ]
        buckets = [e for e in events if e["name"] == "bucket.allreduce" and e["args"].get("mode") == mode]
        assert backward and {e["tid"] for e in backward} == {0}
        assert buckets and 0 not in {e["tid"] for e in buckets}  # the communication thread
    after = [
        e for e in events if e["name"] == "bucket.allreduce" and e["args"].get("mode") == "after_backward"
    ]
    assert after and {e["tid"] for e in after} == {0}
    for mode in ("zero1.reduce_scatter", "zero1.allgather"):
        assert any(e["name"] == mode for e in events)
    allreduces = [e for e in events if e["name"] == "bucket.allreduce"]  # one span, the same arguments
    assert {frozenset(e["args"]) for e in allreduces} == {frozenset({"bucket", "step", "bytes", "mode"})}


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_buckets_overlap_backward(tiny_run):
    """A timing claim (the communication thread must get a core while backward runs)."""
    _, result, _, _, _ = tiny_run
    assert result["overlap"]["bucketed"]["overlap_pct"] > 0


@pytest.mark.timeout(60)
def test_a_rank_killed_mid_step_fails_the_run_with_it_as_the_root_cause(runs_dir):
    sets = [
        *TINY,
        "params.batch=6",
        "params.steps=50",
        "fault.rank=1",
        "fault.action=kill",
        "fault.after_ops=40",
    ]
    code, result, out, err = run_scenario("train", runs_dir, ranks=3, sets=sets, timeout_s=60)
    assert code == 1, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and "killed by SIGKILL" in root
    assert result["ok"] is False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode,after_ops", [("bucketed", 12), ("zero1", 7)])
def test_a_corrupted_message_fails_the_run_naming_the_step(runs_dir, mode, after_ops):
    sets = [
        *TINY,
        f"params.mode=[{mode}]",
        "fault.rank=1",
        "fault.action=corrupt",
        f"fault.after_ops={after_ops}",
    ]
    code, result, out, err = run_scenario("train", runs_dir, ranks=2, sets=sets, timeout_s=60)
    assert code == 1, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "ResultMismatch" in root and "step " in root
    assert "was corrupted" in root or "parameters differ across ranks" in root


@pytest.mark.parametrize(
    "sets,num_ranks,key,says",
    [
        (["params.layers=0"], 2, "params.layers", "must be an integer >= 1, got 0"),
        (["params.heads=5"], 2, "params.heads", "must divide d_model=64"),
        (["params.batch=6"], 4, "params.batch", "the global batch 6 must be divisible by the 4 ranks"),
        (["params.context=40000"], 2, "params.context", "must be < the text's length 34006 bytes"),
        (["params.mode=[bucketed,ddp]"], 2, "params.mode[1]", "expected one of 'per_tensor', 'bucketed'"),
        (["params.mode=[]"], 2, "params.mode", "a non-empty list"),
        (["params.mode=[zero1,zero1]"], 2, "params.mode", "without repeats, got ['zero1', 'zero1']"),
        (
            ['params.prompt="\\udc80"'],
            2,
            "params.prompt",
            "must be text that UTF-8 can encode, got '\\udc80'",
        ),
        (["params.temperature=-0.5"], 2, "params.temperature", "must be >= 0 (0: greedy), got -0.5"),
        (["params.min_lr=0.5"], 2, "params.min_lr", "must be in [0, lr=0.008] or null, got 0.5"),
        (["params.warmup_steps=-1"], 2, "params.warmup_steps", "must be >= 0, got -1"),
        (["params.baseline=mpi"], 2, "params.baseline", "expected one of 'ddp', 'fsdp' or null"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(capsys, runs_dir, sets, num_ranks, key, says):
    args = ["run", "train", "--ranks", str(num_ranks), "--out", str(runs_dir)]
    code = cli.main([*args, *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    given = next(s for s in sets if s.startswith(key.split("[")[0] + "="))  # the value's --set
    assert err[0].startswith(f"error: --set {given}: ") and says in err[0]
    if "[" in key:  # an element of a list: the message names which
        assert f"key '{key}'" in err[0]
    assert not runs_dir.exists()  # nothing started


@pytest.mark.timeout(60)
def test_baseline_ddp_without_torch_is_one_line_and_exit_2(runs_dir):
    code = (
        "import sys; sys.modules['torch'] = None\n"  # find_spec('torch') now says it is missing
        "from playground.cli import main\n"
        f"sys.exit(main(['run', 'train', '--baseline', 'ddp', '--out', {str(runs_dir)!r}]))\n"
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert (
        "key 'params.baseline': ddp needs PyTorch: torch is not installed: pip install torch==2.13.0"
        in lines[0]
    )


@pytest.mark.timeout(90)
def test_the_node_runs_under_mpiexec(ranks, runs_dir):  # noqa: F811 - the fixture imported above
    need(MPIEXEC is not None, NO_MPICH)
    port = free_tcp_port()
    sets = [a for s in [*TINY, "params.mode=[bucketed,zero1]"] for a in ("--set", s)]
    ranks.start(
        [MPIEXEC, "-n", "2", "-genv", "MASTER_ADDR", "127.0.0.1", "-genv", "MASTER_PORT", str(port),
         *PLAYGROUND, "node", "train", "--out", str(runs_dir), *sets],
        clean_env(),
    )  # fmt: skip
    [(code, out, err)] = ranks.finish(timeout_s=80)
    assert code == 0, out + err
    result = json.loads((runs_dir / f"train-{port}" / "result.json").read_text())
    assert (
        result["ok"]
        and result["transport"] == "tcp"
        and [m["mode"] for m in result["modes"]] == ["bucketed", "zero1"]
    )


@pytest.mark.timeout(60)
def test_across_two_emulated_hosts(as_root, runs_dir):
    args = ["run", "train", "--ranks", "4", "--hosts", "2", "--link", "1gbit", "--out", str(runs_dir)]
    sets = [a for s in [*TINY, "params.mode=[bucketed]"] for a in ("--set", s)]
    proc = run_cli([*args, *sets], timeout_s=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    assert (
        result["hosts"] == 2 and result["placement"] == [0, 0, 1, 1] and result["link"] == {"rate": "1gbit"}
    )
    assert result["modes"][0]["tokens_per_s"] > 0
