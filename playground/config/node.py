"""A node: the function every rank runs, and the contract its module declares to the framework.

A scenario's `node: nodes.queue:main` names a module and the function every rank calls as
`main(comm, params)`. What else the framework may ask of the module is one object, its
`NodeContract`, declared once at the end of the module:

    CONTRACT = NodeContract(Params, summarize, ranks=Ranks(2, "queue runs one server and one client"),
                            threaded=True)

A module without `CONTRACT` (the plain form of docs/NODE_API.md: module-level `Params`, `RANKS`,
`check_scenario`, `summarize`, `THREADED`) gets the same object from those names, read here and
nowhere else. A module with a `CONTRACT` that also defines one of those names the contract leaves
out is refused: the name would otherwise be ignored without a word.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from playground.config.params import build_params
from playground.core.errors import ParamError, ScenarioError
from playground.display.report import Report


@dataclass(frozen=True)
class Ranks:
    """The rank count a node runs on, declared once in its contract and checked by the scenario
    loader before any process starts: `ranks=Ranks(1, "the cache lab measures one core")` makes
    `--ranks 2` one line, "...: the cache lab measures one core, needs 1, got 2"."""

    exactly: int
    why: str

    def check(self, ranks: int) -> None:
        if ranks != self.exactly:
            raise ParamError("ranks", f"{self.why}, needs {self.exactly}, got {ranks}")


Summarize = Callable[[list[dict], Any, Path], Report]
CheckScenario = Callable[[Any, int], None]


@dataclass(frozen=True)
class NodeContract:
    """What a node offers besides its `main`; every field is optional.

    params          the frozen dataclass a scenario's `params:` is validated into (absent: a plain dict)
    summarize       summarize(results, params, run_dir) -> Report, in the launcher after every rank
                    returned (absent: rank 0's `rows` as the table)
    ranks           the one rank count the node runs on, e.g. Ranks(1, "the cache lab measures one core")
    check_scenario  check_scenario(params, ranks) -> None: checks across params and the rank count,
                    raising ParamError, before any process starts
    threaded        main starts threads of its own (a communication thread, a server): `bind: auto`
                    leaves its ranks to the scheduler instead of pinning each to one CPU
    checkpoint_identity  checkpoint_identity(params, ranks) -> dict: what a checkpoint the node
                    writes must match to be gone on from (model, world size, mode...); the launcher
                    compares it with a checkpoint's before a restart or `run --resume` (absent: the
                    node writes none, and a restarted group starts from the beginning)
    live_recovery   live_recovery(params, ranks, way) -> None: the node can go on through a rank's
                    failure without a restart (`recovery.way: peer`, `shrink`), for these params, or
                    raises ParamError saying why not (absent: only `way: restart`)
    """

    params: type | None = None
    summarize: Summarize | None = None
    ranks: Ranks | None = None
    check_scenario: CheckScenario | None = None
    threaded: bool = False
    checkpoint_identity: Callable[[Any, int], dict] | None = None
    live_recovery: Callable[[Any, int, str], None] | None = None

    def build_params(self, raw: Any) -> Any:
        """The scenario's `params:` as the node's `Params` (ParamError naming the key), or as given."""
        return build_params(self.params, raw, "") if self.params else (raw or {})

    def check(self, params: Any, ranks: int) -> None:
        """The rank count, then the node's own checks; ParamError names the key from the scenario's top."""
        if self.ranks is not None:
            self.ranks.check(ranks)
        if self.check_scenario is not None:
            self.check_scenario(params, ranks)

    def check_recovery(self, params: Any, ranks: int, way: str) -> None:
        """`recovery.way` against the node: restart always works; another way only when the node
        offers it for these params (ParamError naming the key)."""
        if way == "restart":
            return
        if self.live_recovery is None:
            raise ParamError("recovery.way", f"this node cannot recover live ({way}); allowed: restart")
        self.live_recovery(params, ranks, way)


# The plain form's module-level names, each with the contract field it fills.
_PLAIN_NAMES = {
    "Params": "params",
    "summarize": "summarize",
    "RANKS": "ranks",
    "check_scenario": "check_scenario",
    "THREADED": "threaded",
}


def contract_of(module: ModuleType) -> NodeContract:
    """The module's `CONTRACT`, or the one its plain module-level names make (module docstring)."""
    declared = getattr(module, "CONTRACT", None)
    plain = {field: getattr(module, name) for name, field in _PLAIN_NAMES.items() if hasattr(module, name)}
    if declared is None:
        return NodeContract(**plain)
    if not isinstance(declared, NodeContract):
        raise ScenarioError(
            f"node module {module.__name__!r}: CONTRACT must be a NodeContract, got {declared!r}"
        )
    for name, field in _PLAIN_NAMES.items():
        if field in plain and getattr(declared, field) is not plain[field]:
            raise ScenarioError(
                f"node module {module.__name__!r}: defines {name} but its CONTRACT does not name it "
                f"({field}={name} in NodeContract(...), or remove {name})"
            )
    return declared


@dataclass(frozen=True)
class Node:
    """A loaded node: `spec` as the scenario gave it (module:function), the module, the function
    every rank calls, and the module's contract."""

    spec: str
    module: ModuleType
    main: Callable[..., Any]
    contract: NodeContract


def load_node(spec: str, where: str = "node") -> Node:
    """'pkg.mod:func' (":main" may be left out) -> its Node; ScenarioError if it cannot be imported
    or its contract is not one (`where` names the scenario key in that line)."""
    mod_name, _, func_name = spec.partition(":")
    func_name = func_name or "main"
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise ScenarioError(f"{where}: cannot import node module {mod_name!r} ({e})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ScenarioError(f"{where}: module {mod_name!r} has no function {func_name!r}")
    return Node(spec, module, func, contract_of(module))
