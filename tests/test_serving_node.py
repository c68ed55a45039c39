"""End to end: `python -m playground run serving*` and `run paged-attention` with a real server
rank serving a model and client ranks, at small sizes; bad input is one line, exit 2."""

import json

import numpy as np
import pytest

from playground.cli.testing import run_scenario
from playground.transformer import ModelConfig, Transformer, save_model

SMALL_MODEL = ["params.layers=2", "params.d_model=32", "params.heads=4", "params.context=128"]


@pytest.mark.timeout(90)
def test_section46_small_every_policy_generates_the_same_checked_tokens(tmp_path):
    code, result, out, err = run_scenario(
        "serving",
        out=tmp_path,
        ranks=3,
        timeout_s=80,
        sets=[
            *SMALL_MODEL,
            "params.num_requests=12",
            "params.prompt_min=10",
            "params.prompt_max=40",
            "params.output_mean=20",
            "params.output_cap=60",
            "params.max_new_tokens=64",
            "params.capacity_tokens=1200",
            "params.verify_every=1",
            "params.check_invariants=true",
        ],
    )
    assert code == 0, out + err  # the report checks: same tokens everywhere, dense equal, nothing held
    rows = {r["policy"]: r for r in result["rows"]}
    assert set(rows) == {"paged", "contiguous", "reserve_max"}
    assert all(r["done"] == 13 and r["failed"] == 0 for r in rows.values())  # and params.prompt's
    assert rows["reserve_max"]["peak_seqs"] <= 1200 // (10 + 64)  # each reserves prompt + max_new_tokens
    assert len({r["generated_tokens"] for r in rows.values()}) == 1
    assert (tmp_path / "latest" / "serving-memory.png").stat().st_size > 0


@pytest.mark.timeout(60)
def test_samples_forked_hold_the_lectures_pages_and_equal_the_copies(tmp_path):
    """Lecture 4.5 with generated tokens (100-token prompt, 4 samples of 10): 28 vs 10 pages."""
    code, result, out, err = run_scenario(
        "serving-samples",
        out=tmp_path,
        timeout_s=50,
        sets=[
            *SMALL_MODEL,
            "params.sample_prompt_tokens=100",
            "params.sample_tokens=10",
            "params.n=4",
            "params.capacity_tokens=2000",
            "params.max_new_tokens=64",
            "params.verify_every=1",
        ],
    )
    assert code == 0, out + err
    pages = {(r["policy"], r["mode"]): r["pages"] for r in result["rows"]}
    assert pages[("paged", "copies")] == 28 and pages[("paged", "fork")] == 10
    assert pages[("reserve_max", "fork")] == pages[("reserve_max", "copies")]  # no sharing without pages


@pytest.mark.timeout(60)
def test_prefix_caching_finds_the_system_prompt(tmp_path):
    code, result, out, err = run_scenario(
        "serving-prefix",
        out=tmp_path,
        ranks=3,
        timeout_s=50,
        sets=[
            *SMALL_MODEL,
            "params.num_requests=8",
            "params.system_prompt_tokens=32",
            "params.user_prompt_tokens=8",
            "params.new_tokens=4",
            "params.in_flight=2",
            "params.capacity_tokens=2000",
            "params.verify_every=1",
        ],
    )
    assert code == 0, out + err
    rows = {r["prefix_caching"]: r for r in result["rows"]}
    assert rows[False]["hit_rate_pct"] == 0 and rows[True]["hit_rate_pct"] > 0
    assert rows[False]["done"] == rows[True]["done"] == 8


@pytest.mark.timeout(60)
def test_batch_sweep_reports_a_step_per_batch_size(tmp_path):
    code, result, out, err = run_scenario(
        "serving-batch",
        out=tmp_path,
        timeout_s=50,
        sets=[*SMALL_MODEL, "params.batch_sizes=[1,3]", "params.new_tokens=4", "params.capacity_tokens=512"],
    )
    assert code == 0, out + err
    assert [r["batch"] for r in result["rows"]] == [1, 3]
    assert all(r["step_ms"] > 0 and r["tokens_per_s"] > 0 and r["failed"] == 0 for r in result["rows"])


@pytest.mark.timeout(60)
def test_paged_attention_sweep_times_every_layout(tmp_path):
    code, result, out, err = run_scenario(
        "paged-attention",
        out=tmp_path,
        timeout_s=50,
        sets=[
            "params.contexts=[16,64]",
            "params.block_sizes=[8,16]",
            "params.pool_bytes=64KiB",
            "params.rounds=1",
        ],
    )
    assert code == 0, out + err
    ratios = result["rows"]  # the first table: paged / contiguous per context and block
    assert {(r["context"], r["block_size"]) for r in ratios} == {(16, 8), (16, 16), (64, 8), (64, 16)}
    assert all(r["paged_x"] > 0 and r["in_order_x"] > 0 for r in ratios)
    (note,) = [n for n in result["notes"] if n.startswith("block 16:")]  # its verdict, from its rows
    over = [str(r["context"]) for r in ratios if r["block_size"] == 16 and r["paged_x"] > 1.2]
    assert ("goal: within 1.20x, met;" in note) == (not over)
    assert all(f"context {c}" in note or f", {c} (" in note for c in over)
    layouts = {r["layout"] for r in result["tables"][1]["rows"]}
    assert layouts == {"contiguous", "paged", "paged in order", "paged (one block at a time)"}
    assert (tmp_path / "latest" / "attention.png").stat().st_size > 0


@pytest.mark.timeout(60)
def test_a_trained_model_file_is_served(tmp_path):
    config = ModelConfig(layers=1, d_model=16, heads=2, context=64)
    save_model(tmp_path / "model.npz", config, Transformer(config, seed=5).params)
    code, result, out, err = run_scenario(
        "serving-samples",
        out=tmp_path,
        timeout_s=50,
        sets=[
            f"params.model={tmp_path / 'model.npz'}",
            "params.policies=[paged]",
            "params.sample_prompt_tokens=20",
            "params.sample_tokens=5",
            "params.n=2",
            "params.capacity_tokens=512",
            "params.max_new_tokens=16",
            "params.verify_every=1",
        ],
    )
    assert code == 0, out + err
    assert {r["mode"] for r in result["rows"]} == {"copies", "fork"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sets,ranks,expect",
    [
        (["params.block_size=0"], None, "params.block_size=0: must be >= 1, got 0"),
        (["params.n=0"], None, "params.n=0: must be >= 1, got 0"),
        (["params.width=8"], None, "params.width=8: a model of KV width 256"),
        (["params.heads=5"], None, "params.heads=5: must divide d_model=64"),
        (
            ["params.model=/nonexistent/model.npz"],
            None,
            "params.model=/nonexistent/model.npz: /nonexistent/model.npz does not exist",
        ),
        (
            ["params.prompt=\udcff"],
            None,
            "params.prompt=\\udcff: must be UTF-8 text; byte b'\\xff' at 0 is not",
        ),
        ([], 1, "serving needs one server and at least one client"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, sets, ranks, expect):
    code, _, out, err = run_scenario("serving", out=tmp_path, ranks=ranks, sets=sets, timeout_s=50)
    assert code == 2, out + err
    assert expect in err + out and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_model_file_that_does_not_match_the_width_is_one_line(tmp_path):
    config = ModelConfig(layers=1, d_model=16, heads=2, context=64)  # KV width 32
    save_model(tmp_path / "model.npz", config, np.zeros(config.num_params, np.float32))
    code, _, out, err = run_scenario(
        "serving",
        out=tmp_path,
        sets=[f"params.model={tmp_path / 'model.npz'}", "params.width=256"],
        timeout_s=50,
    )
    assert (
        code == 2
        and f"params.model={tmp_path / 'model.npz'}: a model of KV width 32" in err + out
        and "Traceback" not in err
    )


def _trained_run(runs, name="20260101-000000-train", steps=3):
    """A run directory as `run train` leaves it: model.npz and result.json's losses."""
    run = runs / name
    run.mkdir(parents=True)
    config = ModelConfig(layers=2, d_model=64, heads=4, context=64)
    save_model(run / "model.npz", config, Transformer(config, seed=1).params)
    losses = [5.5, 4.0, 3.25][:steps]
    (run / "result.json").write_text(json.dumps({"modes": [{"mode": "bucketed", "losses": losses}]}))
    return run


DEFAULT_SMALL = ["params.num_requests=40", "params.verify_every=1"]


@pytest.mark.timeout(90)
def test_the_default_serves_the_last_trained_model_and_shows_its_text(tmp_path):
    run = _trained_run(tmp_path)
    # wide enough that the line naming the model is one line however long the temporary path
    wide = {"COLUMNS": "400"}
    code, result, out, err = run_scenario("serving", out=tmp_path, sets=DEFAULT_SMALL, timeout_s=80, env=wide)
    assert code == 0, out + err
    assert result["model_path"] == str(run / "model.npz")
    said = f"served model: {run / 'model.npz'} (2 layers, d_model 64, 4 heads, context 64, trained 3 steps"
    assert said in out and "final loss 3.250" in out
    texts = next(t for t in result["tables"] if t["title"].startswith("What was served"))["rows"]
    assert [r["request"] for r in texts][0] == "your prompt" and texts[0]["prompt"] == "分页"
    assert len(texts) == 4 and all(r["generated"] and "\ufffd" not in r["prompt"] for r in texts)
    assert {r["policy"] for r in result["rows"]} == {"paged", "contiguous", "reserve_max"}
    assert "paged / reserve-max tokens/s: the decode-step model predicts" in out


@pytest.mark.timeout(90)
def test_without_a_trained_model_the_default_says_it_serves_random_weights(tmp_path):
    code, result, out, err = run_scenario(
        "serving", out=tmp_path, sets=[*DEFAULT_SMALL, "params.policies=[paged]"], timeout_s=80
    )
    assert code == 0, out + err
    assert result["model_path"] is None
    assert "served model: random weights" in out and "python -m playground run train" in out


@pytest.mark.timeout(90)
def test_params_model_takes_a_run_directory(tmp_path):
    run = _trained_run(tmp_path / "elsewhere")
    code, result, out, err = run_scenario(
        "serving",
        out=tmp_path,
        sets=[*DEFAULT_SMALL, "params.policies=[paged]", f"params.model={run}"],
        timeout_s=80,
    )
    assert code == 0, out + err
    assert result["model_path"] == str(run / "model.npz")


@pytest.mark.timeout(60)
def test_a_run_directory_without_a_model_or_a_file_of_another_kind_is_one_line(tmp_path):
    empty = tmp_path / "20260101-000000-train"
    empty.mkdir()
    other = tmp_path / "weights.npz"
    np.savez(other, w1=np.zeros((4, 4)), b1=np.zeros(4))  # some other network's weights
    for value, expect in (
        (empty, f"params.model={empty}: {empty} is a directory without model.npz"),
        (other, f"params.model={other}: {other} is not a model file: no config, layout, params"),
    ):
        code, _, out, err = run_scenario(
            "serving", out=tmp_path, sets=[f"params.model={value}"], timeout_s=50
        )
        assert code == 2 and expect in err + out and "Traceback" not in err, out + err
