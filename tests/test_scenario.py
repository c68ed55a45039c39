"""Scenario loading and validation: every bad input is one line naming where it came from (the file
and key, or the flag that overrode it) and what is allowed."""

import dataclasses
import re

import pytest

from playground.cli.testing import run_cli, scenario_file_with
from playground.config.scenario import builtin_names, load_scenario
from playground.core.errors import ScenarioError


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
            "key 'params.bogus': unknown key; allowed: algorithm, check, collective, counts, dtype",
        ),
        (GOOD, ["params.iters=many"], "key 'params.iters': expected an integer, got 'many'"),
        (GOOD, ["params.sizes=[8,12XB]"], "key 'params.sizes[1]': expected a byte count"),
        (GOOD, ["ranks=0"], "key 'ranks': expected an integer from 1 to 64, got 0"),
        (GOOD, ["ranks=65"], "key 'ranks': expected an integer from 1 to 64"),
        (GOOD, ["transport=udp"], "key 'transport': expected one of ipc, tcp, shm"),
        (GOOD, ["params.dtype=float8"], "key 'params.dtype': expected one of 'float32'"),
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
    """Each bad value written into the file names the file and key; given with --set (when the
    row has overrides), it names that --set and not the file."""
    path = write(tmp_path, text)
    if overrides:
        path = str(scenario_file_with(path, overrides, tmp_path / "in-file"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    msg = str(e.value)
    assert fragment in msg and path in msg and "\n" not in msg
    if overrides:
        assert_names_the_flag(write(tmp_path, text), overrides, fragment)


def assert_names_the_flag(path: str, overrides: list[str], fragment: str, **flags) -> None:
    """The error of `overrides` (and --ranks etc. in `flags`) starts with the --set that gave the
    key `fragment` names, shows the key only when that --set does not, and never names the file."""
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, overrides=overrides, **flags)
    msg = str(e.value)
    assert "\n" not in msg and path not in msg, msg
    named = re.match(r"key '([^']+)': (.*)", fragment)
    if named is None:
        assert fragment in msg
        return
    key, says = named.groups()
    given = next((o for o in reversed(overrides) if key.startswith(o.partition("=")[0])), None)
    if given is None:  # a required key missing from a section only flags made: the first of them
        given = next(o for o in overrides if o.startswith(key.split(".")[0] + "."))
    expected = f"--set {given}: key {key!r}: {says}"
    if key == given.partition("=")[0]:  # the --set shows the key already
        expected = f"--set {given}: {says}"
    assert msg.startswith(expected), msg


def test_unknown_scenario_lists_builtins():
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'; built-in: .*ring"):
        load_scenario("nope")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args,fragment",
    [
        (["run", "nope"], "unknown scenario 'nope'"),
        (["run", "ring", "--ranks", "0"], "error: --ranks: expected an integer from 1 to 64, got 0"),
        (
            ["run", "ring", "--set", "ranks=0"],
            "error: --set ranks=0: expected an integer from 1 to 64, got 0",
        ),
        (
            ["run", "ring", "--set", "params.sizes=[1QB]"],
            "error: --set params.sizes=[1QB]: key 'params.sizes[0]'",
        ),
        (["run", "ring", "--set", "params.nope=1"], "error: --set params.nope=1: unknown key"),
        (["inspect", "/nonexistent/run"], "no such run directory"),
        (
            ["run", "ring", "--hosts", "2", "--link", "fast"],
            "error: --link: key 'link.rate': expected a rate",
        ),
        (
            ["run", "ring", "--hosts", "2", "--link", "1gbit,delay=200"],
            "error: --link: key 'link.delay': expected a duration",
        ),
        (
            ["run", "ring", "--hosts", "2", "--link", "1gbit,loss=1%"],
            "error: --link: key 'link.loss': unknown key; allowed: delay, rate",
        ),
        (["run", "ring", "--hosts", "9"], "error: --hosts: expected an integer from 1 to the rank count (8)"),
        (["run", "ring", "--link", "1gbit"], "error: --link: needs hosts"),
        (
            ["run", "ring", "--hosts", "2", "--transport", "shm"],
            "error: --transport: with hosts, ranks talk ipc",
        ),
        (["run", "pingpong", "--ranks", "1"], "error: --ranks: ping-pong needs at least 2 ranks"),
        (
            ["run", "pingpong", "--set", "params.budget_s=0"],
            "error: --set params.budget_s=0: must be > 0 seconds",
        ),
        (["bench", "allreduce", "--iters", "0"], "error: --iters: key 'params.iters': must be >= 1, got 0"),
    ],
)
def test_cli_bad_input_exit_2_without_traceback(tmp_path, args, fragment):
    proc = run_cli(args + (["--out", str(tmp_path)] if args[0] in ("run", "bench") else []), timeout_s=50)
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


HOSTS = GOOD.replace("ranks: 3", "ranks: 4") + "hosts: 2\n"


def test_hosts_link_and_placement(tmp_path):
    s = load_scenario(write(tmp_path, HOSTS + "link: {rate: 1gbit, delay: 200us}\n"))
    assert s.hosts == 2 and s.placement == (0, 0, 1, 1)
    assert (s.link.rate, s.link.delay) == (10**9, 0.0002)
    assert s.to_dict()["link"] == {"rate": "1gbit", "delay": "200us"}  # reloads as it was given
    cli = load_scenario(write(tmp_path, HOSTS), hosts=4, link="100mbit,delay=1ms")
    assert cli.placement == (0, 1, 2, 3) and cli.link.rate == 10**8 and cli.link.delay == 0.001
    assert load_scenario(write(tmp_path, HOSTS + "link: 10gbit\n")).link.rate == 10**10


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["link.rate=fast"], "key 'link.rate': expected a rate in bits per second such as 100mbit"),
        (["link.jitter=1ms"], "key 'link.jitter': unknown key; allowed: delay, rate"),
        (["link=[1]"], "key 'link': expected a mapping {rate: 1gbit, delay: 200us}"),
        (["transport=shm"], "key 'transport': with hosts, ranks talk ipc inside a host"),
        (["fault.action=cut_link"], "key 'fault.host': required for action cut_link (or rank"),
        (["fault.action=cut_link", "fault.host=2"], "key 'fault.host': expected 0..1, got 2"),
        (["fault.action=cut_link", "fault.rank=0", "fault.host=1"], "rank 0 is on host 0, not 1"),
        (["fault.action=cut_link", "fault.host=1", "fault.after_s=1", "fault.after_ops=3"], "not both"),
        (["fault.action=delay_link", "fault.host=1"], "key 'fault.delay': required for action delay_link"),
        (["fault.action=delay_link", "fault.host=1", "fault.delay=1ms", "fault.after_ops=2"], "after_s"),
        (["fault.action=kill_host", "fault.host=1", "fault.delay=1ms"], "only for action delay_link"),
        (["fault.action=kill", "fault.rank=1", "fault.after_s=1"], "key 'fault.after_s': only for the host"),
        (["fault.action=kill"], "key 'fault.rank': required for action kill"),
    ],
)
def test_bad_hosts_input_is_one_clear_line(tmp_path, overrides, fragment):
    in_file = str(scenario_file_with(write(tmp_path, HOSTS), overrides, tmp_path / "in-file"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(in_file)
    assert fragment in str(e.value) and in_file in str(e.value) and "\n" not in str(e.value)
    assert_names_the_flag(write(tmp_path, HOSTS), overrides, fragment)


def test_the_transports_registry_says_which_kinds_cross_hosts(tmp_path, monkeypatch):
    """The scenario check asks the transport's registry entry, not its name: a launched kind without
    an end across hosts is refused with hosts, whatever it is called."""
    from playground.comm import registry

    for kind in registry.LAUNCHED:
        if registry.BY_NAME[kind].crosses_hosts:
            assert load_scenario(write(tmp_path, HOSTS), transport=kind).transport == kind
        else:
            with pytest.raises(ScenarioError, match=f"--transport: with hosts, .*; {kind} is one host only"):
                load_scenario(write(tmp_path, HOSTS), transport=kind)
    one_host_tcp = dataclasses.replace(registry.BY_NAME["tcp"], open_end_across_hosts=None)
    monkeypatch.setitem(registry.BY_NAME, "tcp", one_host_tcp)
    with pytest.raises(ScenarioError, match="tcp is one host only"):
        load_scenario(write(tmp_path, HOSTS), transport="tcp")


def test_host_faults_need_hosts(tmp_path):
    sets = ["fault.action=kill_host", "fault.host=0"]
    with pytest.raises(ScenarioError, match="^--set fault.action=kill_host: kill_host needs hosts"):
        load_scenario(write(tmp_path, GOOD), overrides=sets)
    with pytest.raises(ScenarioError, match="/in-file/s.yaml: key 'fault.action': kill_host needs hosts"):
        load_scenario(str(scenario_file_with(write(tmp_path, GOOD), sets, tmp_path / "in-file")))


def test_which_rank_counts_a_host_fault(tmp_path):
    path = write(tmp_path, HOSTS)
    cut = load_scenario(path, overrides=["fault.action=cut_link", "fault.host=1", "fault.after_ops=5"])
    assert cut.fault.counting_rank(cut.placement) == 2 and cut.fault.target_host(cut.placement) == 1
    timed = load_scenario(path, overrides=["fault.action=kill_host", "fault.rank=3", "fault.after_s=1"])
    assert (
        timed.fault.counting_rank(timed.placement) is None and timed.fault.target_host(timed.placement) == 1
    )
    old = load_scenario(write(tmp_path, GOOD), overrides=["fault.rank=1", "fault.action=kill"])
    assert old.fault.counting_rank(None) == 1 and old.to_dict()["fault"] == {
        "rank": 1,
        "action": "kill",
        "after_ops": 0,
    }
