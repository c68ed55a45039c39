"""`python -m playground results`: its pages name the machine and the commands, a failed section is
said on its page and in the exit status, and bad input is one line."""

import json

import pytest

from playground.cli.testing import run_cli
from playground.commands import accuracy, results
from playground.core.errors import ScenarioError
from playground.models.calibration import ENVIRONMENT


def _config(sections: str, tmp_path) -> results.ResultsConfig:
    return results.ResultsConfig.from_flags(
        sections=sections, quick=True, rounds=1, out=tmp_path / "pages", work=tmp_path / "work"
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = run_cli(["results", "--sections", "nosuch", "--out", str(tmp_path)], timeout_s=30)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "error: --sections nosuch: allowed: collectives, alltoall, simulator, labs, training, compute, steptime, serving, parallelism, tensor, moe, chaos, recovery, observability"
    )
    with pytest.raises(ScenarioError, match="--rounds 0: expected at least 1"):
        results.ResultsConfig.from_flags(quick=True, rounds=0, out=tmp_path, work=tmp_path)


def test_a_page_names_the_machine_and_its_commands_and_a_failure_is_said(tmp_path, monkeypatch):
    """The labs section with its command replaced by one that writes a summary; the simulator's by
    one that fails: both pages are written, the index links them, and the exit status is 1."""

    def fake_run(self, *args, timeout_s=0):
        self.commands.append("python -m playground " + " ".join(args))
        if args[0] == "lecture":
            out = results.Path(args[args.index("--out") + 1])
            run = out / "run1"
            run.mkdir(parents=True)
            (run / "summary.md").write_text(
                "## 1. Memory\n\n![cache](runs/x/cache.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
            )
            (out / "latest").symlink_to(run)
            return None
        raise ScenarioError(f"`python -m playground {' '.join(args)}` exited with 1")

    monkeypatch.setattr(results.Context, "run", fake_run)
    code = results.run_results(_config("labs,simulator", tmp_path))
    assert code == 1
    labs = (tmp_path / "pages" / "labs.md").read_text()
    assert labs.startswith(results.PAGE_FRONT + "# The labs beside the lecture\n\nMeasured on ")
    assert "| CPU |" in labs and "| cores |" in labs
    assert "python -m playground lecture --out labs/lecture --quick" in labs  # as typed in the results dir
    assert str(tmp_path) not in labs
    assert "| 1 | 2 |" in labs and "cache.png" not in labs  # a plot's link would break the site
    assert labs.rstrip().endswith(
        "(The plots are on the lecture's own page, `index.html` in the run directory above.)"
    )
    sim = (tmp_path / "pages" / "simulator.md").read_text()
    assert "This section failed: `python -m playground calibrate" in sim
    assert "python -m playground results --sections simulator" in sim
    index = (tmp_path / "pages" / "index.md").read_text()
    assert "- [The labs beside the lecture](labs.md)" in index
    assert "- Collectives against Gloo and MPICH: not measured yet" in index


def test_pages_with_model_columns_read_one_calibration_measured_first(tmp_path, monkeypatch):
    """No calibration here: `results` measures one before the sections whose model columns read it,
    names it to their commands (PLAYGROUND_CALIBRATION), lists `calibrate` on their pages, and leaves
    the environment as it found it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    seen = {}

    def fake_run(self, *args, timeout_s=0):
        self.commands.append("python -m playground " + " ".join(args))
        if args[0] == "calibrate":
            results.Path(args[args.index("--out") + 1]).write_text("{}")
            return None
        seen[args[0]] = results.os.environ.get(ENVIRONMENT)
        out = results.Path(args[args.index("--out") + 1])
        (out / "run1").mkdir(parents=True)
        (out / "run1" / "summary.md").write_text("| a |\n|---|\n| 1 |\n")
        (out / "latest").symlink_to(out / "run1")
        return None

    monkeypatch.setattr(results.Context, "run", fake_run)
    assert results.run_results(_config("labs", tmp_path)) == 0
    assert seen["lecture"].endswith("calibration/calibration.json")
    labs = (tmp_path / "pages" / "labs.md").read_text()
    assert labs.index("python -m playground calibrate --out") < labs.index("python -m playground lecture")
    assert "Model columns: the calibration measured first (`calibrate` above)." in labs
    assert ENVIRONMENT not in results.os.environ


def _sim_result(transport: str, rows: list[tuple[int, str, int, float, float | None]]) -> dict:
    return {
        "simulation": {"transport": transport},
        "rows": [
            {"ranks": n, "algorithm": a, "size": s, "time_us": t, "model_us": m} for n, a, s, t, m in rows
        ],
    }


def test_the_simulator_page_has_every_row_its_ratio_the_counts_and_the_plot(tmp_path):
    """Given simulated rows and three rounds of measurements: the median and spread per row, the
    ratio, held-out marks for what the calibration did not run, the counts within 25% and 2x, the
    worst rows first, and a plot file."""
    benches = {
        ("ipc", 2, "ring", 4096): [100.0, 120.0, 80.0],  # median 100: simulated 110 is within 25%
        ("ipc", 3, "ring", 4096): [100.0, 100.0, 100.0],  # simulated 150: within 2x, not 25%
        ("ipc", 2, "tree", 262144): [1000.0, 900.0, 1100.0],  # simulated 2500: beyond 2x
        ("shm", 2, "ring", 4096): [10.0, 10.0, 10.0],  # simulated 9: within
    }
    sims = [
        _sim_result("ipc", [(2, "ring", 4096, 110.0, 90.0), (3, "ring", 4096, 150.0, None),
                            (2, "tree", 262144, 2500.0, 800.0), (4, "ring", 4096, 1.0, None)]),
        _sim_result("shm", [(2, "ring", 4096, 9.0, 8.0)]),
    ]  # fmt: skip
    calibrated = {"ranks": [2, 4, 8], "sizes": [64, 4096, 65536]}
    rows = accuracy.rows_from(sims, benches, calibrated)
    assert len(rows) == 4  # the 4-rank row was never measured
    by = {(r["transport"], r["ranks"], r["algorithm"], r["size"]): r for r in rows}
    first = by["ipc", 2, "ring", 4096]
    assert (first["measured_us"], first["low_us"], first["high_us"], first["rounds"]) == (
        100.0,
        80.0,
        120.0,
        3,
    )
    assert first["ratio"] == pytest.approx(1.1) and not first["held_out"]
    assert by["ipc", 3, "ring", 4096]["held_out"] and by["ipc", 2, "tree", 262144]["held_out"]
    assert accuracy.within(rows, 1.25) == 2 and accuracy.within(rows, 2) == 3
    lines = accuracy.summary(rows)
    assert lines[0].startswith(
        "**2 of 4 simulated times are within 25% of the measured median, 3 within 2x**"
    )
    assert "(held-out rows: 0 of 2 within 25%, 1 within 2x)" in lines[0]
    assert lines[1].startswith("Worst rows: ipc 2 ranks tree 256 KiB 2.50; ipc 3 ranks ring 4 KiB 1.50")
    table = accuracy.table(rows)
    assert table[0].startswith("| transport | ranks | size | algo | measured (us) | spread | simulated (us)")
    assert "| ipc | 2 | 4 KiB | ring | 100 | 80-120 | 110 | 1.10 | 90 |  |" in table
    assert "| ipc | 3 | 4 KiB | ring | 100 | 100-100 | 150 | 1.50 | sim | yes |" in table
    path = accuracy.plot(rows, tmp_path / "accuracy.svg")  # SVG: the docs keep it (*.png is ignored)
    svg = path.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "within 25%" in svg


def test_each_simulated_row_is_the_median_of_the_simulations():
    runs = [
        _sim_result("shm", [(2, "ring", 4096, t, None), (4, "rd", 65536, u, None)])
        for t, u in ((10.0, 300.0), (12.0, 100.0), (11.0, 200.0))
    ]
    merged = accuracy.median_simulation(runs)
    assert merged["simulation"]["transport"] == "shm"
    assert [(r["ranks"], r["time_us"]) for r in merged["rows"]] == [(2, 11.0), (4, 200.0)]


def test_the_serving_page_shows_each_runs_tables_and_notes(tmp_path, monkeypatch):
    """Each scenario's command replaced by one that writes a result.json: the page has a heading,
    a markdown table and the notes of every step, both row sizes of the kernel among them."""

    def fake_run(self, *args, timeout_s=0):
        self.commands.append("python -m playground " + " ".join(args))
        out = results.Path(args[args.index("--out") + 1])
        run = out / f"run{len(self.commands)}"
        run.mkdir(parents=True)
        table = {"title": f"{args[1]} table", "rows": [{"a": 1.5, "b": "x"}], "columns": {"a": "A", "b": "B"}}
        (run / "result.json").write_text(json.dumps({"tables": [table], "notes": [f"{args[1]} note"]}))
        (out / "latest").unlink(missing_ok=True)
        (out / "latest").symlink_to(run)

    monkeypatch.setattr(results.Context, "run", fake_run)
    assert results.run_results(_config("serving", tmp_path)) == 0
    page = (tmp_path / "pages" / "serving.md").read_text()
    assert page.startswith(results.PAGE_FRONT + "# Serving a model from the paged KV cache\n\nMeasured on ")
    scenarios = (
        "paged-attention",
        "serving-batch",
        "serving",
        "serving-throughput",
        "serving-samples",
        "serving-prefix",
    )
    for scenario in scenarios:
        assert f"**{scenario} table**\n\n| A | B |\n|---|---|\n| 1.50 | x |" in page
        assert f"- {scenario} note" in page
    assert "--set params.heads=4 --set params.head_dim=16" in page


def test_commands_are_shown_as_typed_in_the_results_directory(tmp_path):
    """Where this machine put the runs (/tmp/..., runs/<stamp>-results/) is no part of a command a
    reader types: paths inside the results directory are written relative to it."""
    work = tmp_path / "20261204-000000-results"
    line = (
        f"python -m playground bench allreduce --link {work}/simulator/calibration.json "
        f"--out {work}/simulator/ipc-n2-r1"
    )
    assert results.as_typed(line, work) == (
        "python -m playground bench allreduce --link simulator/calibration.json --out simulator/ipc-n2-r1"
    )
    assert results.as_typed("python -m playground run train --out /elsewhere/runs", work).endswith(
        "--out /elsewhere/runs"
    )
