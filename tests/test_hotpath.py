"""`python -m playground.commands.hotpath`: every rank of a world as a greenlet in one thread, over the real
transport, so a collective's own work is measured without waiting. Checked: it runs the real
collective correctly and counts its Python calls; no time is asserted."""

import cProfile
import pstats

import pytest

from playground.commands import hotpath


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport,ranks,algo", [("shm", 2, "rd"), ("shm", 3, "tree"), ("local", 4, "ring")])
def test_measures_cpu_and_python_calls_per_call(transport, ranks, algo):
    pr = cProfile.Profile()
    cpu_us = hotpath.measure(ranks, 64, algo, transport, calls=20, profile=pr)
    assert cpu_us > 0
    calls = hotpath.python_calls(pstats.Stats(pr), 20, ranks)
    assert 5 < calls < 1000  # the all-reduce's own frames, not the harness's


@pytest.mark.timeout(60)
def test_command_prints_a_line_per_tracing_mode(capsys):
    assert hotpath.main(["--calls", "20", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "rd all-reduce of 8 B, 2 ranks over shm, tracing off:" in out
    assert "as bench traces (phases, no per-message events):" in out
    assert "with per-message trace events (as in a run):" in out and "Python calls per rank per call" in out
