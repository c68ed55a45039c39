"""The tools that check the code agree with each other: pre-commit runs the ruff the test extra pins,
and mypy's checked set is one list of existing packages (and modules of a package not held whole)."""

import re
import tomllib
from pathlib import Path

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
    assert "playground/comm" in files and "playground/collectives" in files
    exists = [
        (ROOT / f).is_dir() and any((ROOT / f).glob("*.py")) or f.endswith(".py") and (ROOT / f).is_file()
        for f in files
    ]
    assert all(exists), [f for f, e in zip(files, exists, strict=True) if not e]
    assert _pinned("mypy")
