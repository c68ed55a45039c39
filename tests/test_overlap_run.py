"""The overlap model (pure) and real runs: serial vs overlapped backward + all-reduce.

The default run test asserts the result's shape, the step measures' identities and the threads
the trace shows; that overlap actually hid communication on this machine is the `timing` test
(`pytest -m timing`): on two shared cores thread wake-ups can cost more than they hide."""

import json

import pytest

from playground.buckets.overlap_stats import StepTimes, pipeline_step_s, serial_step_s
from playground.cli.testing import run_cli, run_scenario, scenario_file_with
from playground.config.scenario import load_scenario
from playground.core.errors import ScenarioError
from playground.tracing.timeline import intersection_s
from playground.tracing.trace import read_events


# -- the two-stage pipeline model -----------------------------------------------------------------
@pytest.mark.parametrize(("c", "m"), [(10.0, 4.0), (4.0, 10.0), (5.0, 5.0)])
def test_equal_chunks_follow_the_pipeline_formula(c, m):
    n = 16  # the lecture's 16 chunks
    assert pipeline_step_s([c] * n, [m] * n) == pytest.approx(c + (n - 1) * max(c, m) + m)
    assert serial_step_s([c] * n, [m] * n) == pytest.approx(n * (c + m))


def test_compute_bound_hides_all_but_the_last_chunk_and_comm_bound_is_set_by_comm():
    assert pipeline_step_s([10] * 16, [4] * 16) == 16 * 10 + 4
    assert pipeline_step_s([4] * 16, [10] * 16) == 4 + 16 * 10


def test_pipeline_with_uneven_buckets_waits_for_readiness_and_for_the_stream():
    # bucket 0 ready at 1, comm 1..6; bucket 1 ready at 2, waits for the stream: 6..7; bucket 2 ready at 10
    assert pipeline_step_s([1, 1, 8], [5, 1, 2]) == 12
    assert pipeline_step_s([], []) == 0
    with pytest.raises(ValueError):
        pipeline_step_s([1], [1, 2])


def test_step_measures():
    t = StepTimes(step_s=12.0, compute_s=10.0, comm_s=5.0)
    assert t.exposed_comm_s == 2.0
    assert t.hidden_comm_s == 3.0
    assert t.overlap_efficiency == pytest.approx(0.6)
    serial = StepTimes(step_s=15.0, compute_s=10.0, comm_s=5.0)
    assert serial.hidden_comm_s == 0.0 and serial.exposed_comm_s == 5.0


def test_intersection_of_span_sets():
    compute = [(0, 10), (12, 20)]
    comm = [(5, 13), (19, 30), (6, 7)]
    assert intersection_s(compute, comm) == 5 + 1 + 1
    assert intersection_s(compute, []) == 0
    assert intersection_s([(0, 1)], [(1, 2)]) == 0


# -- real runs ------------------------------------------------------------------------------------
SMALL = [
    "params.settings=[{name: cb, layers: 8, layer_bytes: 512KiB, compute_ms: 10},"
    " {name: mb, layers: 6, layer_bytes: 1MiB, compute_ms: 2, bucket_mb: 2}]",
    "params.iters=3",
    "params.warmup=1",
]


@pytest.fixture(scope="module")
def overlap_run(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("overlap") / "runs"
    code, result, out, err = run_scenario("overlap", runs_dir, ranks=2, sets=SMALL, timeout_s=50)
    assert code == 0, out + err
    return result, out, runs_dir / "latest"


@pytest.mark.timeout(60)
def test_overlap_runs_both_modes_and_the_trace_shows_two_threads(overlap_run, tmp_path):
    result, out, run_dir = overlap_run
    rows = {(r["setting"], r["mode"]): r for r in result["rows"]}
    assert set(rows) == {("cb", "serial"), ("cb", "overlap"), ("mb", "serial"), ("mb", "overlap")}
    for r in rows.values():
        assert r["wrong"] == 0
        assert r["exposed_ms"] == pytest.approx(r["step_ms"] - r["compute_ms"])
        assert r["hidden_ms"] == pytest.approx(max(0.0, r["compute_ms"] + r["comm_ms"] - r["step_ms"]))
    for name in ("cb", "mb"):
        serial = rows[(name, "serial")]
        # serial: nothing hidden, the step is compute then comm (its timers are nested in the step's)
        assert serial["hidden_ms"] == 0
        assert serial["step_ms"] >= serial["compute_ms"] + serial["comm_ms"] - 1.0
        assert serial["speedup"] == 1.0
        assert result["traced_overlap_ms_per_step"][name] >= 0
    assert "hid" in out and "ms of communication" in out

    events = read_events(run_dir / "rank-0.jsonl")
    ov_events = [e for e in events if (e.get("args") or {}).get("mode") == "overlap"]
    compute_tids = {e["tid"] for e in ov_events if e["name"] == "backward.layer"}
    comm_tids = {e["tid"] for e in ov_events if e["name"] == "bucket.allreduce"}
    assert compute_tids == {0} and len(comm_tids) == 1 and 0 not in comm_tids
    serial_comm_tids = {
        e["tid"] for e in events if e["name"] == "bucket.allreduce" and e["args"].get("mode") == "serial"
    }
    assert serial_comm_tids == {0}
    # one span for a bucket's all-reduce on either thread: the same arguments, the step numbered
    allreduces = [e for e in events if e["name"] == "bucket.allreduce"]
    assert {frozenset(e["args"]) for e in allreduces} == {
        frozenset({"bucket", "step", "bytes", "setting", "mode"})
    }
    assert {e["args"]["step"] for e in allreduces} == {0, 1, 2, 3}  # warm-up 1 + 3 timed

    trace_file = tmp_path / "t.json"
    proc = run_cli(["inspect", str(run_dir), "--trace", str(trace_file)], timeout_s=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = json.loads(trace_file.read_text())["traceEvents"]
    threads = {(e["pid"], e["tid"]) for e in trace if e.get("ph") == "X" and e["name"] == "bucket.allreduce"}
    assert {tid for pid, tid in threads if pid == 0} >= {0} | comm_tids


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_overlap_really_overlaps(overlap_run):
    result = overlap_run[0]
    rows = {(r["setting"], r["mode"]): r for r in result["rows"]}
    for name in ("cb", "mb"):
        # overlap: the trace shows compute and all-reduce running at once in every setting
        assert result["traced_overlap_ms_per_step"][name] > 0
    # where there is compute to hide behind, the measured step is below compute + comm. (Not asserted
    # for the tiny 'mb' setting: on a loaded 2-core machine thread wake-ups can cost more than it hides.)
    ov = rows[("cb", "overlap")]
    assert ov["step_ms"] < ov["compute_ms"] + ov["comm_ms"]
    assert ov["hidden_ms"] > 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("params.settings=[{name: x, layers: 0}]", "params.settings[0].layers", "must be >= 1"),
        ("params.settings=[{name: x, compute_ms: -2}]", "params.settings[0].compute_ms", "must be >= 0"),
        ("params.settings=[]", "params.settings", "at least one"),
        ("params.settings=[{name: x, colour: red}]", "params.settings[0].colour", "unknown key"),
        ("params.algorithm=butterfly", "params.algorithm", "one of 'ring', 'tree', 'hd', 'rd'"),
    ],
)
def test_bad_params_get_one_line_and_exit_2(runs_dir, tmp_path, override, key, words):
    code, result, out, err = run_scenario("overlap", runs_dir, sets=[override], timeout_s=25)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --set {override}: ") and words in lines[0], err
    shown = override.startswith(f"{key}=")  # else the line names the key inside what --set gave
    assert shown or f"--set {override}: key '{key}': " in lines[0], err
    with pytest.raises(ScenarioError) as e:  # the same value in the file: the file and the key
        load_scenario(str(scenario_file_with("overlap", [override], tmp_path)))
    assert f"overlap.yaml: key '{key}'" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("preset", ["overlap", "overlap-compute-bound", "overlap-comm-bound"])
def test_presets_validate(preset):
    from playground.config.scenario import load_scenario

    sc = load_scenario(preset)
    assert sc.params.settings and all(s.layers == 16 for s in sc.params.settings)  # the lecture's 16 chunks


@pytest.mark.timeout(60)
def test_a_corrupted_warm_up_all_reduce_fails_the_lab(runs_dir):
    """after_ops 0: the bit lands in the first all-reduce, a warm-up step's, which is checked too."""
    sets = [*SMALL, "fault.rank=1", "fault.action=corrupt"]
    code, result, out, err = run_scenario("overlap", runs_dir, ranks=2, sets=sets, timeout_s=50)
    assert code == 1, out + err
    assert "at warm-up iteration 0, bucket" in out + err
