"""`python -m playground results`: its pages name the machine and the commands, a failed section is
said on its page and in the exit status, and bad input is one line."""

import json

import pytest

from playground.cli.testing import run_cli
from playground.commands import results
from playground.core.errors import ScenarioError


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = run_cli(["results", "--sections", "nosuch", "--out", str(tmp_path)], timeout_s=30)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "error: --sections nosuch: allowed: collectives, simulator, labs, training, serving, parallelism"
    )
    with pytest.raises(ScenarioError, match="--rounds 0: expected at least 1"):
        results.run_results(None, True, 0, tmp_path, tmp_path)


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
    code = results.run_results("labs,simulator", True, 1, tmp_path / "pages", tmp_path / "work")
    assert code == 1
    labs = (tmp_path / "pages" / "labs.md").read_text()
    assert labs.startswith("# The labs beside the lecture\n\nMeasured on ")
    assert "| CPU |" in labs and "| cores |" in labs
    assert "python -m playground lecture --out" in labs and "--quick" in labs
    assert "| 1 | 2 |" in labs and "cache.png" not in labs  # a plot's link would break the site
    assert labs.rstrip().endswith(
        "(The plots are on the lecture's own page, `index.html` in the run directory above.)"
    )
    sim = (tmp_path / "pages" / "simulator.md").read_text()
    assert "This section failed: `python -m playground run pingpong" in sim
    assert "python -m playground results --sections simulator" in sim
    index = (tmp_path / "pages" / "index.md").read_text()
    assert "- [The labs beside the lecture](labs.md)" in index
    assert "- Collectives against Gloo and MPICH: not measured yet" in index


def test_the_spread_of_a_point_is_over_every_bench_run(tmp_path):
    runs = []
    for k, t in enumerate((100.0, 140.0, 90.0)):
        run = tmp_path / f"bench{k}"
        run.mkdir()
        rows = [
            {"algorithm": "ring", "size": 4096, "time_us": t},
            {"algorithm": "tree", "size": 4096, "time_us": 7.0},
        ]
        (run / "result.json").write_text(json.dumps({"ranks": 2, "rows": rows}))
        runs.append(run)
    assert results._spread(runs) == {(2, "ring", 4096): (90.0, 140.0), (2, "tree", 4096): (7.0, 7.0)}


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
    assert results.run_results("serving", True, 1, tmp_path / "pages", tmp_path / "work") == 0
    page = (tmp_path / "pages" / "serving.md").read_text()
    assert page.startswith("# Serving a model from the paged KV cache\n\nMeasured on ")
    for scenario in ("paged-attention", "serving-batch", "serving", "serving-samples", "serving-prefix"):
        assert f"**{scenario} table**\n\n| A | B |\n|---|---|\n| 1.50 | x |" in page
        assert f"- {scenario} note" in page
    assert "--set params.heads=4 --set params.head_dim=16" in page
