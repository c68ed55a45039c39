"""`import playground as pg`: the API gives what the command line gives for the same scenario (the
same result.json keys, rows and checks; only timings differ), bad arguments are the errors the
command line prints, keywords map onto the scenario and the flags as documented, the import stays
cheap, and a result draws itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import playground as pg
from playground.api.arguments import override_values
from playground.api.result import Result
from playground.cli import parse_args
from playground.cli.testing import run_cli, subprocess_env
from playground.config.scenario import load_scenario
from playground.core.errors import ParamError, ScenarioError
from playground.display.notebook import NotebookProgress


def cli_result(args: list[str], out: Path) -> dict:
    done = run_cli([*args, "--out", str(out)], timeout_s=50)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "latest" / "result.json").read_text())


def same_shape(api: Result, cli: dict, keys=("size", "algorithm", "wrong")) -> None:
    assert api.ok and cli["ok"]
    assert set(api) == set(cli)
    assert [sorted(r) for r in api.rows] == [sorted(r) for r in cli["rows"]]
    assert [tuple(r[k] for k in keys) for r in api.rows] == [tuple(r[k] for k in keys) for r in cli["rows"]]
    assert [t["title"] for t in api.tables] == [t["title"] for t in cli["tables"]]


# -- the same code path as the command line --------------------------------------------------
@pytest.mark.timeout(60)
def test_run_gives_what_the_cli_gives(tmp_path):
    cli = cli_result(
        ["run", "ring", "--ranks", "2", "--set", "params.sizes=[8,1KiB]", "--set", "params.iters=2"],
        tmp_path / "cli",
    )
    r = pg.run("ring", ranks=2, sizes=[8, "1KiB"], iters=2, out=tmp_path / "api")
    same_shape(r, cli)
    assert (r.run_dir / "scenario.yaml").read_text() == (Path(cli["run_dir"]) / "scenario.yaml").read_text()
    assert sorted(p.name for p in r.run_dir.glob("rank-*.jsonl")) == ["rank-0.jsonl", "rank-1.jsonl"]


@pytest.mark.timeout(60)
def test_bench_gives_what_the_cli_gives(tmp_path):
    flags = ["--ranks", "2", "--algo", "ring,tree", "--sizes", "8..1KiB", "--step", "32", "--iters", "2"]
    cli = cli_result(["bench", "allreduce", *flags], tmp_path / "cli")
    r = pg.bench(
        "allreduce", ranks=2, algo=["ring", "tree"], sizes="8..1KiB", step=32, iters=2, out=tmp_path / "api"
    )
    same_shape(r, cli)
    assert [p.name for p in r.images()] == ["busbw.png"]  # what `bench` plots, shown in a notebook


@pytest.mark.timeout(60)
def test_simulate_gives_exactly_what_the_cli_gives(tmp_path):
    """Virtual time is deterministic: every row is equal, not only its keys."""
    cli = cli_result(
        ["simulate", "allreduce", "--ranks", "8", "--algo", "ring,tree", "--sizes", "1KiB,1MiB"], tmp_path
    )
    r = pg.simulate("allreduce", ranks=8, algo="ring,tree", sizes=["1KiB", "1MiB"], out=tmp_path / "api")
    same_shape(r, cli)
    assert r.rows == cli["rows"]


# -- bad arguments: the command line's errors --------------------------------------------------
BAD = [
    (lambda: pg.run("ring", ranks=0), ["run", "ring", "--ranks", "0"]),
    (lambda: pg.run("ring", sizes=[8, "1XB"]), ["run", "ring", "--set", "params.sizes=[8,1XB]"]),
    (lambda: pg.run("ring", colour="red"), ["run", "ring", "--set", "params.colour=red"]),
    (lambda: pg.run("no-such-scenario"), ["run", "no-such-scenario"]),
    (lambda: pg.run("ring", **{"fault.rank": 9}), ["run", "ring", "--set", "fault.rank=9"]),
    (lambda: pg.bench("allreduce", sizes="8..1XB"), ["bench", "allreduce", "--sizes", "8..1XB"]),
    (lambda: pg.simulate("allreduce", ranks=0), ["simulate", "allreduce", "--ranks", "0"]),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call, argv", BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_arguments_raise_the_line_the_cli_prints(call, argv, tmp_path):
    with pytest.raises(ScenarioError) as raised:
        call()
    done = run_cli([*argv, "--out", str(tmp_path)], timeout_s=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {raised.value}"]


@pytest.mark.timeout(30)
def test_a_flag_the_parser_rejects_is_its_own_message(tmp_path):
    with pytest.raises(ScenarioError) as raised:
        pg.bench("allreduce", transport="pigeon")
    done = run_cli(["bench", "allreduce", "--transport", "pigeon"], timeout_s=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {raised.value}"]  # one line, the same


def test_unknown_keywords_and_values_are_bad_input():
    with pytest.raises(
        ScenarioError, match=r"bench allreduce: unknown keyword 'colour'; allowed: .*\balgo\b"
    ):
        pg.bench("allreduce", colour="red")
    with pytest.raises(ScenarioError, match="bench table: .*command line only"):
        pg.bench("table")
    with pytest.raises(ParamError, match="start_method: expected one of fork, spawn, got 'forkserver'"):
        pg.run("ring", start_method="forkserver")
    with pytest.raises(
        ScenarioError, match=r"launch\(f\): key 'ranks': expected an integer from 1 to 64, got 0"
    ):
        pg.launch(lambda comm, params: None, ranks=0, name="f")
    with pytest.raises(ScenarioError, match=r"launch\(f\): key 'params': plain data only"):
        pg.launch(lambda comm, params: None, ranks=2, params={"x": object()}, name="f")
    items = (i for i in range(3))
    with pytest.raises(
        ScenarioError, match=r"launch\(f\): cannot send \S*<lambda> to the ranks \(dill: TypeError"
    ):
        pg.launch(lambda comm, params: next(items), ranks=2, name="f")


# -- keywords -> the scenario and the flags (no processes) ---------------------------------------
def test_a_keyword_is_a_top_level_key_by_name_and_else_a_param():
    values = override_values(
        {"sizes": [8, "1MiB"], "timeout_s": 5, "fault.rank": 1, "name": "mine"}, params={"node": "x"}
    )
    assert values == {
        "params.sizes": [8, "1MiB"],
        "timeout_s": 5,
        "fault.rank": 1,
        "name": "mine",
        "params.node": "x",
    }
    scenario = load_scenario(
        "ring", values=override_values({"sizes": (8, "1KiB"), "iters": 3, "timeout_s": 5})
    )
    via_set = load_scenario("ring", overrides=["params.sizes=[8,1KiB]", "params.iters=3", "timeout_s=5"])
    assert scenario == via_set and scenario.params.sizes == (8, 1024) and scenario.timeout_s == 5.0


def _cli_config(argv: list[str]):
    """The config the command line builds from `argv`."""
    args = parse_args(argv)
    return args.func.config(args)


def test_keywords_build_the_config_the_command_line_builds(tmp_path):
    """The API does not go through the parser: it gives its keywords to the command's config, and
    gets the very config the command line gets from the same flags."""
    from playground.commands.bench_config import BenchConfig
    from playground.sim.options import SimulateConfig

    keywords = {
        "ranks": 4,
        "algo": ["ring", "tree"],
        "sizes": "8..16MiB",
        "no_check": True,
        "set": {"fault.rank": 1},
    }
    argv = ["bench", "allreduce", "--ranks", "4", "--algo", "ring,tree", "--sizes", "8..16MiB", "--no-check"]
    assert BenchConfig.from_flags("allreduce", **keywords) == _cli_config([*argv, "--set", "fault.rank=1"])
    sim = SimulateConfig.from_flags("allreduce", data=False, alpha="2us", measured=["a", "b"], ranks=16)
    argv = [
        "simulate",
        "allreduce",
        "--no-data",
        "--alpha",
        "2us",
        "--measured",
        "a",
        "--measured",
        "b",
        "-n",
        "16",
    ]
    assert sim == _cli_config(argv)
    assert sim.spec.data is False and sim.measured == ("a", "b") and sim.spec.ranks == (16,)
    with pytest.raises(ScenarioError, match="simulate: unknown keyword 'no_check'"):
        pg.simulate("allreduce", no_check=True)
    with pytest.raises(ScenarioError, match=r"bench allreduce: no_check: expected True or False, got 'yes'"):
        pg.bench("allreduce", no_check="yes")


# -- importing it -----------------------------------------------------------------------------
def test_import_stays_cheap_and_the_api_functions_are_the_packages_names():
    code = (
        "import sys, playground as pg\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'numpy', 'zmq', 'matplotlib', 'rich', 'yaml', 'dill', 'multiprocess'})\n"
        "import playground.launcher.run, playground.launcher.launch, playground.commands.bench\n"
        "from playground.launcher.run import execute\n"
        "print(heavy, [callable(f) and f.__module__ for f in (pg.run, pg.launch, pg.bench, pg.simulate)],"
        " pg.allreduce.__module__, 'run' in dir(pg))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env())
    assert done.stdout.strip() == (
        "[] ['playground.api', 'playground.api', 'playground.api', 'playground.api'] playground.collectives True"
    ), done.stderr
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        pg.nothing  # noqa: B018


# -- how a result shows itself ----------------------------------------------------------------
def test_result_draws_its_tables_notes_failures_and_plots(tmp_path):
    from playground.display.plot import figure

    with figure(tmp_path / "busbw.png", (2, 2)) as (_, ax):
        ax.plot([0, 1], [0, 1])
    data = {
        "ok": False,
        "scenario": "ring",
        "ranks": 1,
        "transport": "ipc",
        "elapsed_s": 1.5,
        "rows": [{"size": 8, "algorithm": "ring", "wrong": -1}],
        "tables": [
            {"title": "t<1>", "rows": [{"size": 8, "algorithm": "ring", "wrong": -1}], "columns": None}
        ],
        "notes": ["a note"],
        "failures": ["rank 0: why"],
        "run_dir": str(tmp_path),
    }
    r = Result(data)
    assert dict(r) == data and r["elapsed_s"] == 1.5 and r.returned is None and not r.ok
    page = r._repr_html_()
    assert "ring: 1 rank over ipc, 1.50 s, FAILED -&gt; " in page
    assert "<caption>t&lt;1&gt;</caption>" in page
    assert (
        '<td class="num" style="text-align: right">8</td><td>ring</td><td class="num" style="text-align: right">n/a</td>'
        in page
    )
    assert "<li>a note</li>" in page and "<li>rank 0: why</li>" in page
    assert "src='data:image/png;base64," in page
    text = str(r)
    assert (
        text.splitlines()[0].startswith("ring: 1 rank over ipc")
        and "t<1>" in text
        and "FAILED rank 0: why" in text
    )
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert Result.load(tmp_path) == r


def test_notebook_progress_draws_a_bar_per_task():
    bar = NotebookProgress()
    task = bar.add_task("ring", total=None)
    assert "<progress></progress>" in bar.html()  # indeterminate until the total is known
    bar.update(task, completed=3, total=10, description="ring 1KiB")
    assert 'ring 1KiB <progress value="3" max="10"></progress> 3/10 0:00:0' in bar.html()
    bar.advance(task)
    assert "4/10" in bar.html()
