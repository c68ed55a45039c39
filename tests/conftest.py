from pathlib import Path

import pytest


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    """A fresh directory for run directories; the CLI writes runs/<stamp>-<name>/ and runs/latest here."""
    return tmp_path / "runs"


@pytest.fixture
def as_root():
    """Skip a test that needs root (network namespaces, veth, tc) when not root, saying why; where
    PLAYGROUND_REQUIRE_TOOLS is set (CI, which runs as root), fail instead of skipping."""
    import os
    import shutil

    missing = [] if os.geteuid() == 0 else ["root"]
    missing += [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        why = f"emulated hosts need {' and '.join(missing)}"
        if os.environ.get("PLAYGROUND_REQUIRE_TOOLS"):
            pytest.fail(f"{why}, and PLAYGROUND_REQUIRE_TOOLS is set")
        pytest.skip(why)
