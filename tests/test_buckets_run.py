"""Real multi-process runs of the buckets experiment, and its one-line errors for bad input."""

import json

import pytest

from playground.cli.testing import run_scenario, scenario_file_with
from playground.collectives.bucketing import plan_buckets
from playground.config.scenario import load_scenario
from playground.core.errors import ScenarioError

KIB = 1024
# a small custom model: a tensor larger than the 64 KiB cap, a first bucket of 16 KiB
TENSORS = [4 * KIB, 8 * KIB, 24 * KIB, 200 * KIB, 12 * KIB, 40 * KIB, 4 * KIB, 64 * KIB]
SMALL = [
    f"params.tensor_bytes={json.dumps(TENSORS)}",
    "params.bucket_mb=[0.0625,1]",
    "params.first_bucket_mb=0.015625",
    "params.iters=2",
    "params.warmup=1",
]


@pytest.mark.timeout(60)
def test_custom_list_every_strategy_is_correct_and_modelled(runs_dir):
    code, result, out, err = run_scenario("buckets", runs_dir, ranks=3, sets=SMALL, timeout_s=50)
    assert code == 0, out + err
    rows = {r["strategy"]: r for r in result["rows"]}
    assert list(rows) == ["per-tensor", "bucketed 0.0625 MiB", "bucketed 1 MiB", "single bucket"]
    expected_64k = plan_buckets(TENSORS, 64 * KIB, 16 * KIB)
    assert rows["bucketed 0.0625 MiB"]["num_allreduces"] == len(expected_64k) == 5
    assert rows["per-tensor"]["num_allreduces"] == len(TENSORS)
    assert rows["single bucket"]["num_allreduces"] == 1
    assert rows["bucketed 1 MiB"]["num_allreduces"] == 2  # 16 KiB first bucket, then the rest
    for r in rows.values():
        assert r["wrong"] == 0
        assert r["measured_ms"] > 0 and r["model_ms"] > 0
        assert r["messages"] == r["num_allreduces"] * 2 * (3 - 1)
    ab = result["alpha_beta"]
    assert ab["alpha_s"] >= 0 and ab["beta_bytes_per_s"] > 0
    # the model charges alpha per all-reduce step, so per-tensor must be predicted slowest (equal
    # only if this run's fit put alpha at 0, which a busy machine can do)
    assert rows["per-tensor"]["model_ms"] > rows["single bucket"]["model_ms"] or ab["alpha_s"] == 0
    assert rows["per-tensor"]["model_ms"] >= rows["single bucket"]["model_ms"] - 1e-9
    assert "buckets.png" in result["files"]
    assert (runs_dir / "latest" / "buckets.png").stat().st_size > 0
    assert "alpha =" in out and "beta =" in out


@pytest.mark.timeout(60)
def test_real_architecture_scaled_down(runs_dir):
    code, result, out, err = run_scenario(
        "buckets",
        runs_dir,
        ranks=2,
        timeout_s=50,
        sets=[
            "params.architecture=resnet50",
            "params.scale=0.02",
            "params.iters=1",
            "params.warmup=0",
            "params.algorithm=hd",  # any flat all-reduce of the registry
        ],
    )
    assert code == 0, out + err
    rows = {r["strategy"]: r for r in result["rows"]}
    assert rows["per-tensor"]["num_allreduces"] == 161
    assert all(r["wrong"] == 0 for r in rows.values())
    assert rows["per-tensor"]["messages"] == 161 * 2  # halving-doubling on 2 ranks: 2 log2 2
    assert "resnet50: 161 tensors" in result["tables"][0]["title"]
    assert "x0.02" in result["tables"][0]["title"] and "2 ranks, hd;" in result["tables"][0]["title"]


@pytest.mark.timeout(30)
def test_one_rank_has_no_model_but_still_checks(runs_dir):
    code, result, out, err = run_scenario("buckets", runs_dir, ranks=1, sets=SMALL, timeout_s=25)
    assert code == 0, out + err
    assert result["alpha_beta"] is None
    strategies = {r["strategy"] for r in result["rows"]}  # SMALL's two caps and the two extremes
    assert strategies == {"per-tensor", "bucketed 0.0625 MiB", "bucketed 1 MiB", "single bucket"}
    assert all(r["wrong"] == 0 for r in result["rows"])


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("params.bucket_mb=[25,-1]", "params.bucket_mb", "must be > 0"),
        ("params.tensor_bytes=[]", "params.tensor_bytes", "empty list"),
        ("params.architecture=vgg16", "params.architecture", "'lecture', 'resnet50', 'gpt2'"),
        ("params.model=resnet50", "params.model", "unknown key; allowed: algorithm, architecture, bucket_mb"),
        ("params.algorithm=hier", "params.algorithm", "one of 'ring', 'tree', 'hd', 'rd', got 'hier'"),
        ("params.tensor_bytes=[4KiB,10]", "params.tensor_bytes", "multiple of 4"),
        ("params.scale=0", "params.scale", "(0, 4]"),
    ],
)
def test_bad_params_get_one_line_and_exit_2(runs_dir, tmp_path, override, key, words):
    code, result, out, err = run_scenario("buckets", runs_dir, sets=[override], timeout_s=25)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: --set {override}: ") and words in lines[0]  # the flag, not the file
    assert "Traceback" not in err
    assert not (runs_dir / "latest").exists()
    with pytest.raises(ScenarioError) as e:  # the same value in the file: the file and the key
        load_scenario(str(scenario_file_with("buckets", [override], tmp_path)))
    assert "buckets.yaml" in str(e.value) and f"key '{key}'" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("preset", ["buckets-resnet50", "buckets-gpt2", "buckets-sweep"])
def test_presets_validate(preset):
    from playground.config.scenario import load_scenario

    sc = load_scenario(preset)
    assert sc.params.iters >= 1 and sc.ranks == 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("after_ops", "words"),
    [
        (0, "the ping-pong echo of 8 bytes from rank 1 came back with 1 wrong bytes"),
        (200, "wrong elements (summed over ranks; first seen on rank"),
    ],
)
def test_a_corrupted_message_fails_the_lab_wherever_it_lands(runs_dir, after_ops, words):
    """In the ping-pong that measures alpha and beta (its echo is checked) or in a warm-up or timed
    all-reduce (every pass is checked); with 2 ranks the ping-pong is 7 x 23 round trips."""
    sets = [*SMALL, "fault.rank=1", "fault.action=corrupt", f"fault.after_ops={after_ops}"]
    code, result, out, err = run_scenario("buckets", runs_dir, ranks=2, sets=sets, timeout_s=50)
    assert code == 1, out + err
    assert words in out + err
