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

    from tools import have, need

    need(os.geteuid() == 0, "emulated hosts need root (network namespaces, veth, tc)")
    need(have("ip", "tc"), "emulated hosts need `ip` and `tc` (iproute2)")
