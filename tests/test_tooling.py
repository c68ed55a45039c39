"""The tools that check the code agree with each other: pre-commit runs the ruff the test extra pins,
mypy's checked set is one list of existing packages and modules, and CI runs again, with every tool
required, exactly the tests that skipped for a missing one."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pinned(name: str) -> str:
    (spec,) = [d for d in PYPROJECT["project"]["optional-dependencies"]["test"] if re.match(rf"{name}\b", d)]
    version = spec.partition("==")[2]
    assert version, f"the test extra must pin {name} exactly (==), got {spec!r}"
    return version


def test_pre_commit_runs_the_ruff_the_test_extra_pins():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (ruff,) = [r for r in config["repos"] if r["repo"].endswith("/ruff-pre-commit")]
    assert ruff["rev"] == f"v{_pinned('ruff')}"
    assert {h["id"] for h in ruff["hooks"]} == {"ruff-check", "ruff-format"}


def test_mypy_checks_one_list_of_packages_that_exist():
    files = PYPROJECT["tool"]["mypy"]["files"]
    assert files == ["playground", "nodes"]  # every package: the framework and the nodes
    exist = [
        (ROOT / f / "__init__.py").exists() or (f.endswith(".py") and (ROOT / f).is_file()) for f in files
    ]
    assert all(exist), [f for f, there in zip(files, exist, strict=True) if not there]
    assert _pinned("mypy")


NEEDS_A_TOOL = """
import pytest
from tools import need


@pytest.mark.parametrize("n", [1, 2])
def test_needs(n):
    need(n == 1, "a tool is missing")


def test_plain():
    pass


@pytest.fixture(scope="module")
def tool():
    need(False, "a module's tool is missing")


def test_a(tool):
    pass


def test_b(tool):  # skipped by the fixture's skip that test_a raised, without calling need again
    pass
"""


@pytest.mark.timeout(60)
def test_ci_runs_again_exactly_the_tests_that_skipped_for_a_missing_tool(tmp_path):
    """.ci/run's two steps on a file of five tests under this suite's conftest: without the tools
    three skip and note their ids (PLAYGROUND_SKIPPED_TOOLS), also the one a module fixture's skip
    skipped; with the tools required, those ids alone run again, and fail."""
    (tmp_path / "test_x.py").write_text(NEEDS_A_TOOL)
    (tmp_path / "conftest.py").write_text((Path(__file__).with_name("conftest.py")).read_text())
    noted = tmp_path / "skipped.txt"
    env = {k: v for k, v in os.environ.items() if k != "PLAYGROUND_REQUIRE_TOOLS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent)
    pytest_ = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    first = subprocess.run([*pytest_, "test_x.py"], cwd=tmp_path, capture_output=True, text=True,
                           env={**env, "PLAYGROUND_SKIPPED_TOOLS": str(noted)}, timeout=50)  # fmt: skip
    assert first.returncode == 0 and "2 passed, 3 skipped" in first.stdout, first.stdout
    ids = noted.read_text().splitlines()
    assert ids == ["test_x.py::test_needs[2]", "test_x.py::test_a", "test_x.py::test_b"]
    again = subprocess.run([*pytest_, *ids], cwd=tmp_path, capture_output=True, text=True,
                           env={**env, "PLAYGROUND_REQUIRE_TOOLS": "1"}, timeout=50)  # fmt: skip
    assert again.returncode == 1 and "1 failed, 2 errors in" in again.stdout, again.stdout
    assert "a tool is missing, and PLAYGROUND_REQUIRE_TOOLS is set" in again.stdout
