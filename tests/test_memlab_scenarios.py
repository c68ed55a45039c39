"""The memory-lab scenarios end to end through the CLI, with small sizes; bad input exits 2."""

import pytest

from playground.cli.testing import run_scenario, scenario_file_with
from playground.config.scenario import load_scenario
from playground.core.errors import ScenarioError

CACHE = ["params.max_bytes=256KiB", "params.min_loads=2000", "params.repeats=2"]


@pytest.fixture(scope="module")
def cache_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cache")
    code, result, stdout, stderr = run_scenario("cache", out, sets=CACHE)
    assert code == 0, stdout + stderr
    return result, stdout, out / "latest"


@pytest.mark.timeout(60)
def test_cache_scenario_measures_every_working_set_and_writes_a_plot(cache_run):
    result, out, run_dir = cache_run
    sizes = [r["working_set_bytes"] for r in result["rows"]]
    assert sizes[0] == 4 * 1024 and sizes[-1] == 256 * 1024
    assert all(r["ns_per_load"] > 0 for r in result["rows"])
    names = {lv["level"] for lv in result["levels"]}
    assert {r["level"] for r in result["rows"]} <= names | {""}  # a point is on a found plateau or none
    assert (run_dir / "cache.png").stat().st_size > 0
    assert "cache staircase" in out and "levels detected" in out


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_cache_scenario_finds_levels(cache_run):
    result, out, _ = cache_run
    assert result["levels"], "no plateau found"  # a flat stretch within 15% needs a quiet machine
    assert "OS says" in out


@pytest.mark.timeout(60)
def test_stride_scenario_checksums(tmp_path):
    code, result, out, err = run_scenario(
        "stride",
        tmp_path,
        sets=["params.array_bytes=1MiB", "params.strides=[1,16,17,64]", "params.repeats=1"],
    )
    assert code == 0, out + err
    rows = result["rows"]
    assert [r["elements_read"] for r in rows] == [262144, 16384, 15421, 4096]
    assert [r["lines_touched"] for r in rows] == [16384, 16384, 15421, 4096]
    assert all(r["checksum_ok"] for r in rows)
    assert (tmp_path / "latest" / "stride.png").exists()


@pytest.mark.timeout(60)
def test_gather_scenario_checksums(tmp_path):
    code, result, out, err = run_scenario(
        "gather", tmp_path, sets=["params.src_bytes=256KiB", "params.repeats=1"]
    )
    assert code == 0, out + err
    assert [r["order"] for r in result["rows"]] == ["sequential", "random"]
    assert all(r["checksum_ok"] for r in result["rows"])


@pytest.mark.timeout(60)
def test_paging_scenario_passes_its_own_checks(tmp_path):
    code, result, out, err = run_scenario(
        "paging",
        tmp_path,
        sets=["params.size_bytes=32MiB", "params.cow_size_bytes=8MiB", "params.page_modes=[4KiB]"],
    )
    assert code == 0, out + err
    assert [r["step"] for r in result["rows"]] == ["allocate", "touch first half", "touch second half"]
    assert result["cow"]["parent_unchanged"] is True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["translation", "fragmentation", "pagesize"])
def test_model_scenarios(tmp_path, name):
    code, result, out, err = run_scenario(name, tmp_path)
    assert code == 0, out + err
    assert result["rows"]


@pytest.mark.timeout(60)
def test_translation_reports_exercise_8(tmp_path):
    _, result, _, _ = run_scenario("translation", tmp_path)
    row = next(r for r in result["rows"] if r["virtual"] == "0xc123" and r["process"] == "A")
    assert (row["vpn"], row["frame"], row["physical"], row["ok"]) == (3, 77, "0x134123", True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sets, key",
    [
        (["params.layout=zigzag"], "params.layout"),
        (["params.max_bytes=1KiB"], "params.max_bytes"),
        (["params.statistic=mean"], "params.statistic"),
    ],
)
def test_bad_cache_params_are_one_line_exit_2(tmp_path, sets, key):
    code, _, out, err = run_scenario("cache", tmp_path, sets=sets)
    assert code == 2
    assert err.startswith(f"error: --set {sets[0]}: ") and "Traceback" not in err  # the flag it came from
    with pytest.raises(ScenarioError, match=f"cache.yaml: key '{key}'"):  # from the file: file and key
        load_scenario(str(scenario_file_with("cache", sets, tmp_path)))


@pytest.mark.timeout(60)
def test_memory_labs_need_one_rank(tmp_path):
    code, _, _, err = run_scenario("paging", tmp_path, ranks=2)
    assert code == 2 and "needs 1" in err
