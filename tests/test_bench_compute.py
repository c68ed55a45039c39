"""`bench compute`: ours against torch on one rank's shapes, and where our time goes. Checked: the
measuring processes run without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE while the page says they were
set, every system computes the same loss, the page has every table and row; bad input is one line.
No time is asserted (a benchmark's figures are for a quiet machine)."""

import json

import pytest
from tools import importable, need

from playground.cli.testing import run_cli, subprocess_env
from playground.commands.compute_bench import ComputeConfig
from playground.core.errors import ScenarioError
from playground.transformer.blas import mkl_installed

TINY = ["params.layers=1", "params.d_model=16", "params.heads=2", "params.context=16", "params.batch=4"]


@pytest.mark.timeout(150)
def test_the_page_compares_the_systems_without_openblas_overrides(tmp_path):
    env = subprocess_env({"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576"})
    sets = [a for s in TINY for a in ("--set", s)]
    args = ["bench", "compute", "--out", str(tmp_path), "--scenarios", "train-modes", "--rank-counts", "2"]
    proc = run_cli([*args, "--rounds", "2", *sets], timeout_s=140, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(next(tmp_path.glob("*-compute/compute.json")).read_text())
    assert data["machine"]["openblas_env"] == {} and data["machine"]["blas"][0]["num_threads"] == 1
    (shape,) = data["shapes"]
    assert (shape["scenario"], shape["ranks"], shape["batch"], shape["openblas_env"]) == (
        "train-modes",
        2,
        2,
        {},
    )
    ours = ["native", "mkl", "numpy"] if mkl_installed() else ["native", "numpy"]
    systems = [*ours, "torch"] if importable("torch") else ours
    assert list(shape["step_s"]) == systems and all(len(v) == 2 for v in shape["step_s"].values())
    assert all(v == pytest.approx(shape["losses"]["native"], rel=1e-5) for v in shape["losses"].values())
    assert set(shape["profiles"]) == set(ours)
    page = next(tmp_path.glob("*-compute/compute.md")).read_text()
    assert (
        "(OPENBLAS_CORETYPE=Haswell, OPENBLAS_L2_SIZE=1048576); unset for this benchmark's processes" in page
    )
    for heading in ("What ran", "Forward + backward", "The optimizer step", "Where our time goes", "Against"):
        assert f"## {heading}" in page
    assert "| train-modes | 2 | 32 |" in page
    assert page.count("| train-modes | 2 | native |") == 2  # the shares and the roofline
    if "torch" in systems:
        assert "At least as fast as torch (the medians): ours (native) in" in page and "torch 2.13" in page
    else:
        assert "torch is not installed" in proc.stderr
    if "mkl" not in systems:
        said = " ".join(proc.stderr.split())  # the console wraps at its width
        assert "the mkl package is not installed (pip install 'playground[mkl]')" in said


@pytest.mark.timeout(150)
def test_ours_on_mkl_is_a_column_of_its_own_and_computes_the_same_loss(tmp_path):
    """The `mkl` extra: the same native kernels, their products through MKL (rebound between the
    systems in one process), beside them on numpy's BLAS."""
    need(mkl_installed(), "the mkl package is not installed (pip install 'playground[mkl]')")
    sets = [a for s in TINY for a in ("--set", s)]
    args = ["bench", "compute", "--out", str(tmp_path), "--scenarios", "train-modes", "--rank-counts", "2"]
    proc = run_cli([*args, "--rounds", "2", "--systems", "native,mkl", *sets], timeout_s=140)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(next(tmp_path.glob("*-compute/compute.json")).read_text())
    assert data["machine"]["mkl_blas"].startswith("MKL ") and "mkl" not in data["machine"]["native_blas"]
    (shape,) = data["shapes"]
    assert list(shape["step_s"]) == ["native", "mkl"] and set(shape["profiles"]) == {"native", "mkl"}
    assert shape["losses"]["mkl"] == pytest.approx(shape["losses"]["native"], rel=1e-5)
    page = next(tmp_path.glob("*-compute/compute.md")).read_text()
    assert "| ours (native) | ours (native, MKL) |" in page and page.count("| train-modes | 2 | mkl |") == 2


def options(**given):
    defaults = {"scenarios": "train-modes", "rank_counts": "2", "rounds": 1, "systems": None, "set": []}
    defaults["set"] = TINY
    return {**defaults, **given, "out": "unused"}


@pytest.mark.parametrize(
    "given, said",
    [
        ({"systems": "native,jax"}, "--systems 'jax': compute's are native, mkl, numpy, torch"),
        ({"systems": "numpy"}, "--systems: compute needs native"),
        ({"rank_counts": "3"}, "--rank-counts 3: train-modes's batch of 4 must split evenly over the ranks"),
        ({"rank_counts": "two"}, "--rank-counts 'two': a comma list of integers"),
        ({"rounds": 0}, "--rounds: at least 1, got 0"),
        ({"scenarios": "ring", "set": []}, "--scenarios ring: not a training scenario"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(given, said):
    with pytest.raises(ScenarioError) as e:
        ComputeConfig.from_flags(**options(**given))
    assert said in str(e.value)


def test_bad_input_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    proc = run_cli(["bench", "compute", "--systems", "numpy", "--out", str(tmp_path)], timeout_s=60)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --systems: compute needs native (the profile and the ratios are of it)"
    ]
