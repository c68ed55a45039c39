"""The summarize contract (one rule in the launcher) and the default report, without processes."""

import sys
import types

import pytest

from playground.config.scenario import Scenario
from playground.display.report import Report, Table, default_report, failed_ranks, with_rank_checks
from playground.launcher.run import summarize


@pytest.fixture
def node(monkeypatch):
    """A node module whose summarize records what it was handed."""
    module = types.ModuleType("fake_lab_node")
    module.calls = []
    module.main = lambda comm, params: {}

    def hook(results, params, run_dir):
        module.calls.append(results)
        return Report(ok=True, tables=[Table("t", [{"x": len(results)}])])

    module.summarize = hook
    monkeypatch.setitem(sys.modules, "fake_lab_node", module)
    return module


def outcome(results: list) -> types.SimpleNamespace:
    """What `summarize` reads of a launch: every rank's result, and whether every rank finished."""
    return types.SimpleNamespace(results=results, ok=all(r is not None for r in results))


def scenario(node_name="fake_lab_node") -> Scenario:
    return Scenario(name="fake", node=f"{node_name}:main", ranks=2)


def test_a_rank_that_returned_an_error_is_reported_and_summarize_is_not_called(node, tmp_path):
    results = [{"ok": True, "role": "server"}, {"ok": False, "error": "load 0.5: only 3 of 10 replies"}]
    report = summarize(scenario(), outcome(results), tmp_path)
    assert not report.ok and report.tables == []
    assert report.failures == ["rank 1: load 0.5: only 3 of 10 replies"]
    assert node.calls == []


def test_summarize_sees_every_rank_when_all_succeeded(node, tmp_path):
    results = [{"ok": True}, {"rows": []}]  # "ok" is optional and defaults to True
    report = summarize(scenario(), outcome(results), tmp_path)
    assert report.ok and node.calls == [results]


def test_a_rank_with_data_but_a_failed_check_still_gets_summarized_and_fails_the_run(node, tmp_path):
    results = [{"ok": True}, {"ok": False, "rows": [1]}]  # no "error": the data is there
    report = summarize(scenario(), outcome(results), tmp_path)
    assert node.calls == [results]
    assert not report.ok and report.failures == ["rank 1: not ok"]  # the hook said ok; the rank did not


def test_a_crashed_run_is_not_summarized(node, tmp_path):
    report = summarize(scenario(), outcome([{"ok": True}, None]), tmp_path)
    assert not report.ok and node.calls == []


def test_a_raising_summarize_fails_the_run_with_one_line(node, tmp_path):
    node.summarize = lambda results, params, run_dir: 1 / 0
    report = summarize(scenario(), outcome([{"ok": True}]), tmp_path)
    assert not report.ok
    (line,) = report.failures
    assert line.startswith("fake_lab_node.summarize raised ZeroDivisionError: division by zero")


def test_failed_ranks_needs_both_not_ok_and_an_error():
    results = [{"ok": True, "error": ""}, {"ok": False}, {"ok": False, "error": "boom"}, {}]
    assert failed_ranks(results) == ["rank 2: boom"]


def test_with_rank_checks_keeps_a_report_that_already_failed():
    failed = Report(ok=False, tables=[], failures=["stride 1: checksum 3 != 4 elements read"])
    assert with_rank_checks(failed, [{"ok": False}]) is failed
    fine = Report(ok=True, tables=[])
    assert with_rank_checks(fine, [{"ok": True}, {}]) is fine


def test_default_report_shows_rank_0_rows_and_fails_on_a_not_ok_rank():
    rows = [{"dtype": "float32", "wrong": 0}]
    report = default_report([{"ok": True, "rows": rows}, {"ok": True}], "grid")
    assert report.ok and report.tables == [Table("grid", rows)] and report.failures == []
    report = default_report([{"ok": True, "rows": rows}, {"ok": False}], "grid")
    assert not report.ok and report.failures == ["rank 1: not ok"]


def test_an_unchecked_wrong_count_shows_as_n_a_as_in_nccl_tests():
    """-1 (not checked: a data-free simulation, --no-check) is n/a in the table; result.json keeps -1."""
    from io import StringIO

    from rich.console import Console

    from playground.display.report import render_table

    out = StringIO()
    rows = [{"size": 8, "wrong": -1, "ip_wrong": -1}, {"size": 16, "wrong": 0, "ip_wrong": 3}]
    render_table(
        Table("t", rows, {"size": "size", "wrong": "#wrong", "ip_wrong": "#wrong"}), Console(file=out)
    )
    lines = [line.split() for line in out.getvalue().splitlines() if line.strip().startswith("│")]
    assert [[cell for cell in line if cell != "│"] for line in lines] == [
        ["8", "n/a", "n/a"],
        ["16", "0", "3"],
    ]
