"""The one matplotlib set-up: files written, figures closed, matplotlib imported only when drawing."""

import subprocess
import sys

import pytest

from playground.cli.testing import subprocess_env
from playground.display.plot import figure, plot_busbw, plot_timeline


def open_figures() -> list[int]:
    import matplotlib.pyplot as plt

    return plt.get_fignums()


def test_figure_saves_and_closes(tmp_path):
    with figure(tmp_path / "a.png", (4, 3)) as (fig, ax):
        ax.plot([1, 2], [3, 4])
    with figure(tmp_path / "b.png", (6, 3), ncols=2) as (fig, axes):
        assert len(axes) == 2
        fig.suptitle("two panels")
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.png").stat().st_size > 0
    assert open_figures() == []


def test_a_failing_plot_leaves_no_figure_and_no_file(tmp_path):
    with pytest.raises(RuntimeError, match="drawing failed"), figure(tmp_path / "c.png", (4, 3)):
        raise RuntimeError("drawing failed")
    assert not (tmp_path / "c.png").exists() and open_figures() == []


def test_timeline_and_busbw(tmp_path):
    events = {
        0: [{"ts": 0.0, "dur": 5.0, "cat": "send", "tid": 0}],
        1: [{"ts": 2.0, "dur": 1.0, "cat": "wait"}],
    }
    plot_timeline(events, tmp_path / "t.png")
    rows = [{"algorithm": "ring", "size": s, "busbw_gbps": s / 1e6} for s in (8, 1024, 0)]
    plot_busbw(rows, tmp_path / "bw.png", "ring")
    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "bw.png").stat().st_size > 0


def test_importing_the_nodes_does_not_import_matplotlib():
    # every rank imports its node module: plotting code is imported with it, matplotlib only when drawing
    code = (
        "import sys, pkgutil, importlib, nodes\n"
        "for m in pkgutil.iter_modules(nodes.__path__): importlib.import_module('nodes.' + m.name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
