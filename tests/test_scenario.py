"""Scenario loading and validation: every bad input is one line naming file, key and what is allowed."""

import pytest

from playground.errors import ScenarioError
from playground.scenario import builtin_names, load_scenario
from playground.testing import run_cli


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


GOOD = """
name: mine
node: nodes.collective:main
ranks: 3
params:
  sizes: [8, 1KiB]
"""


def test_builtins_include_ring_and_tree():
    assert {"ring", "tree"} <= set(builtin_names())


def test_load_and_override(tmp_path):
    s = load_scenario(write(tmp_path, GOOD), ranks=5, overrides=["params.sizes=[16,2KiB]", "params.op=max"])
    assert s.ranks == 5 and s.params.sizes == (16, 2048) and s.params.op == "max"
    assert s.to_dict()["params"]["sizes"] == [16, 2048]


@pytest.mark.parametrize(
    "text,overrides,fragment",
    [
        (
            GOOD + "  bogus: 1\n",
            [],
            "key 'params.bogus': unknown key; allowed: algorithm, check, collective, dtype",
        ),
        (GOOD, ["params.iters=many"], "key 'params.iters': expected an integer, got 'many'"),
        (GOOD, ["params.sizes=[8,12XB]"], "key 'params.sizes[1]': expected a byte count"),
        (GOOD, ["ranks=0"], "key 'ranks': expected an integer from 1 to 64, got 0"),
        (GOOD, ["ranks=65"], "key 'ranks': expected an integer from 1 to 64"),
        (GOOD, ["transport=udp"], "key 'transport': expected one of ipc, tcp, shm"),
        (GOOD, ["params.dtype=float16"], "key 'params.dtype': expected one of 'float32'"),
        (GOOD, ["params.iters=0"], "key 'params.iters': must be >= 1, got 0"),
        (GOOD, ["colour=red"], "key 'colour': unknown key; allowed:"),
        (GOOD, ["fault.rank=9"], "key 'fault.rank': expected 0..2, got 9"),
        (GOOD, ["fault.action=explode", "fault.rank=1"], "key 'fault.action': expected one of"),
        ("name: x\n", [], "key 'node': required"),
        ("node: nodes.nope:main\n", [], "cannot import node module 'nodes.nope'"),
        ("node: [unclosed\n", [], "invalid YAML"),
        ("- a list\n", [], "expected a mapping"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, text, overrides, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, overrides=overrides)
    msg = str(e.value)
    assert fragment in msg and path in msg and "\n" not in msg


def test_unknown_scenario_lists_builtins():
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'; built-in: .*ring"):
        load_scenario("nope")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args,fragment",
    [
        (["run", "nope"], "unknown scenario 'nope'"),
        (["run", "ring", "--ranks", "0"], "key 'ranks': expected an integer from 1 to 64, got 0"),
        (["run", "ring", "--set", "params.sizes=[1QB]"], "key 'params.sizes[0]'"),
        (["run", "ring", "--set", "params.nope=1"], "key 'params.nope': unknown key"),
        (["inspect", "/nonexistent/run"], "no such run directory"),
    ],
)
def test_cli_bad_input_exit_2_without_traceback(tmp_path, args, fragment):
    proc = run_cli(args + (["--out", str(tmp_path)] if args[0] == "run" else []), timeout_s=50)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*-ring")), "nothing may run (no run directory) on bad input"


@pytest.mark.timeout(30)
def test_list_shows_builtins():
    proc = run_cli(["list"], timeout_s=25)
    assert proc.returncode == 0
    assert any(line.startswith("ring") for line in proc.stdout.splitlines())
