"""ParamError from a node's `Params.__post_init__` and `check_scenario`: the field travels as a field,
never parsed back out of a message, and becomes one line `key 'params.<field>': <message>`."""

from dataclasses import dataclass

import pytest

from playground.cli.testing import scenario_file_with
from playground.config.params import build_params
from playground.config.scenario import load_scenario
from playground.core.errors import ParamError, ScenarioError


@dataclass(frozen=True)
class Inner:
    n: int = 1

    def __post_init__(self):
        if self.n < 1:
            raise ParamError("n", f"must be >= 1, got {self.n}")


@dataclass(frozen=True)
class Outer:
    inner: tuple[Inner, ...] = (Inner(),)
    lo: int = 0
    hi: int = 1

    def __post_init__(self):
        if self.hi < self.lo:
            raise ParamError("hi", f"must be >= lo ({self.lo}), got {self.hi}")


@dataclass(frozen=True)
class Buggy:
    x: int = 0

    def __post_init__(self):
        raise ValueError("x: a bug in the node, not a bad value")


def test_post_init_param_error_keeps_its_field():
    with pytest.raises(ParamError) as e:
        build_params(Outer, {"lo": 5, "hi": 2})
    assert (e.value.field, e.value.message) == ("hi", "must be >= lo (5), got 2")


def test_nested_dataclass_fields_get_their_path():
    with pytest.raises(ParamError) as e:
        build_params(Outer, {"inner": [{"n": 1}, {"n": 0}]})
    assert e.value.field == "inner[1].n" and e.value.message == "must be >= 1, got 0"


def test_a_value_error_is_a_bug_not_bad_input():
    # only ParamError is bad input; the old "field: message" string parsing is gone
    with pytest.raises(ValueError, match="a bug in the node") as e:
        build_params(Buggy, {})
    assert not isinstance(e.value, ScenarioError)


@pytest.mark.parametrize(
    ("scenario", "ranks", "words"),
    [
        ("queue", 3, "queue runs one server and one client, needs 2, got 3"),
        ("batching", 1, "batching runs one server and one client, needs 2, got 1"),
        ("pipeline", 2, "need one rank per stage, at least 3, got 2"),
        ("kvcache", 1, "kvcache needs one server and at least one client (>= 2), got 1"),
        ("pingpong", 1, "ping-pong needs at least 2 ranks"),
        ("cache", 2, "the cache lab measures one core, needs 1, got 2"),
        ("stride", 2, "the stride lab measures one core, needs 1, got 2"),
        ("gather", 2, "the gather lab measures one core, needs 1, got 2"),
        ("paging", 2, "the paging lab runs in one process (plus its fork), needs 1, got 2"),
        ("pagesize", 3, "the page-size model runs in one process, needs 1, got 3"),
        ("fragmentation", 2, "fragmentation is a single-process model, needs 1, got 2"),
        ("translation", 2, "translation is a single-process model, needs 1, got 2"),
    ],
)
def test_check_scenario_names_the_ranks_key(tmp_path, scenario, ranks, words):
    """From the file: the file and key; from --ranks: the flag, not the file."""
    with pytest.raises(ScenarioError) as e:
        load_scenario(str(scenario_file_with(scenario, [f"ranks={ranks}"], tmp_path)))
    assert str(e.value).endswith(f"{scenario}.yaml: key 'ranks': {words}")
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario, ranks=ranks)
    assert str(e.value) == f"--ranks: {words}"


@pytest.mark.parametrize(
    ("scenario", "override", "line"),
    [
        ("queue", "params.service_ms=-1", "key 'params.service_ms': must be > 0, got -1.0"),
        ("pingpong", "params.window=0", "key 'params.window': iters and window must be >= 1, warmup >= 0"),
        ("ring", "fault.after_ops=-1", "key 'fault.after_ops': must be >= 0, got -1"),
        (
            "translation",
            "params.addresses=[C:0x1]",
            "key 'params.addresses': 'C:0x1' must be PROCESS:ADDRESS",
        ),
    ],
)
def test_post_init_errors_are_one_line_with_the_key(tmp_path, scenario, override, line):
    sets = [override] + (["fault.rank=0"] if override.startswith("fault.") else [])
    with pytest.raises(ScenarioError) as e:
        load_scenario(str(scenario_file_with(scenario, sets, tmp_path)))
    assert f"{scenario}.yaml: {line}" in str(e.value)
    with pytest.raises(ScenarioError) as e:  # the same value from --set: named by that --set
        load_scenario(scenario, overrides=sets)
    key, _, says = line.partition(": ")
    blamed = f"--set {override}: " + (says if key == f"key '{override.partition('=')[0]}'" else line)
    assert str(e.value).startswith(blamed)
