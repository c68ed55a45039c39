"""A node's contract: one `NodeContract` object the scenario loader and the launcher read, declared
by the module as `CONTRACT` or made from the plain module-level names of docs/NODE_API.md."""

import sys
import types
from dataclasses import dataclass

import pytest

from playground.config.node import NodeContract, Ranks, contract_of, load_node
from playground.config.scenario import builtin_dir, builtin_names, load_scenario
from playground.core.errors import ParamError, ScenarioError


@dataclass(frozen=True)
class Params:
    n: int = 1


def _summarize(results, params, run_dir):
    raise AssertionError("not called here")


def _check(params, ranks):
    if params.n > ranks:
        raise ParamError("params.n", f"at most the rank count ({ranks}), got {params.n}")


def _module(monkeypatch, name: str, **names) -> types.ModuleType:
    module = types.ModuleType(name)
    module.main = lambda comm, params: {"ok": True}
    for key, value in names.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _scenario(tmp_path, node: str, ranks: int = 2, params: str = "{}") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"node: {node}\nranks: {ranks}\nparams: {params}\n")
    return str(path)


def test_the_plain_module_level_names_make_the_same_contract(monkeypatch):
    ranks = Ranks(2, "two")
    plain = _module(
        monkeypatch, "plain_node", Params=Params, summarize=_summarize, RANKS=ranks, check_scenario=_check
    )
    plain.THREADED = True
    assert contract_of(plain) == NodeContract(Params, _summarize, ranks, _check, threaded=True)
    assert contract_of(_module(monkeypatch, "bare_node")) == NodeContract()


def test_the_loader_builds_params_and_runs_the_contracts_checks(monkeypatch, tmp_path):
    contract = NodeContract(Params, check_scenario=_check, ranks=Ranks(2, "a pair"))
    _module(monkeypatch, "declared_node", CONTRACT=contract, Params=Params, check_scenario=_check)
    s = load_scenario(_scenario(tmp_path, "declared_node:main", params="{n: 2}"))
    assert s.params == Params(2) and s.contract is contract
    with pytest.raises(ScenarioError, match=r"key 'params.n': at most the rank count \(2\), got 3$"):
        load_scenario(_scenario(tmp_path, "declared_node:main", params="{n: 3}"))
    with pytest.raises(ScenarioError, match="^--ranks: a pair, needs 2, got 3$"):
        load_scenario(_scenario(tmp_path, "declared_node:main"), ranks=3)


def test_a_name_the_contract_leaves_out_is_refused_not_ignored(monkeypatch, tmp_path):
    _module(monkeypatch, "forgetful_node", CONTRACT=NodeContract(Params), Params=Params, summarize=_summarize)
    with pytest.raises(ScenarioError, match="defines summarize but its CONTRACT does not name it"):
        load_scenario(_scenario(tmp_path, "forgetful_node"))
    _module(monkeypatch, "odd_node", CONTRACT={"params": Params})
    with pytest.raises(ScenarioError, match="CONTRACT must be a NodeContract"):
        load_node("odd_node:main")


def test_a_function_run_from_python_declares_no_contract():
    from playground.config.scenario import function_scenario

    assert function_scenario(lambda comm, params: None, 2).contract == NodeContract()


def test_every_built_in_node_declares_its_contract():
    import yaml

    for name in builtin_names():
        spec = yaml.safe_load((builtin_dir() / f"{name}.yaml").read_text())["node"]
        node = load_node(spec)
        assert isinstance(getattr(node.module, "CONTRACT", None), NodeContract), spec
        assert node.contract.params is getattr(node.module, "Params", None), spec
