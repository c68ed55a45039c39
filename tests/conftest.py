import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers start with COLUMNS=80 and LINES=24 set; a run started by a test would
    # then wrap its piped output at 80 columns instead of display/report.py's PIPED_WIDTH, as no
    # serial run does. Its children see what a serial run's see.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_runtest_logreport(report):
    """Each test that skipped for a missing tool is noted for .ci/run's second step (tests/tools.py)."""
    from tools import note_skipped

    note_skipped(report)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The timing tests measure speed: a run that selects them runs one test at a time, in this
    process, whatever addopts' `-n` says (a worker a core would share the cores they time)."""
    expression = config.option.markexpr or ""
    if "timing" in expression.replace("not timing", "") and hasattr(config.option, "numprocesses"):
        config.option.numprocesses, config.option.dist, config.option.tx = 0, "no", []


@pytest.fixture(autouse=True)
def no_calibration(tmp_path_factory, monkeypatch):
    """No test reads the calibration.json of the directory it happens to run in (a developer's own):
    PLAYGROUND_CALIBRATION names a file that does not exist, here and in every child process."""
    from playground.models.calibration import ENVIRONMENT

    monkeypatch.setenv(ENVIRONMENT, str(tmp_path_factory.getbasetemp() / "no-calibration.json"))


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


@pytest.fixture
def two(tmp_path):
    """Rank 0's and rank 1's shared-memory mailboxes (a world of 2) in tmp_path; closed afterwards."""
    from playground.comm import mailbox

    a, b = (mailbox.open_mailboxes(str(tmp_path), r, 2) for r in (0, 1))
    yield a, b
    a.close()
    b.close()
