from pathlib import Path

import pytest


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    """A fresh directory for run directories; the CLI writes runs/<stamp>-<name>/ and runs/latest here."""
    return tmp_path / "runs"
