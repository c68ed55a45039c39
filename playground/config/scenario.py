"""YAML scenario -> validated, frozen `Scenario`; the one place config is resolved.

Precedence is fixed: command line (--ranks, --transport, --set) > file > defaults. Everything is
checked here, before any process starts; a problem is a ScenarioError naming where the value came
from (the file and key, or the flag that overrode it: `--ranks`, `--set params.iters=0`) and what
is allowed. Its parts: the `fault:` drill (fault.py), the command line's values over the file's and
who gave each (overrides.py), the node and its contract (node.py).
"""

import copy
import dataclasses
import importlib.resources
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import yaml

from playground.comm.registry import BY_NAME, LAUNCHED, LaunchedKind
from playground.config.fault import Fault, check_fault
from playground.config.node import NodeContract, load_node
from playground.config.overrides import Origins, apply_command_line
from playground.config.overrides import apply_override as apply_override  # the --set helpers, as the
from playground.config.overrides import parse_override as parse_override  # CLI's tests read them here
from playground.config.params import build_params, params_to_dict
from playground.config.recovery import Recovery
from playground.core.errors import ParamError, ScenarioError
from playground.core.suggest import did_you_mean
from playground.core.topology import Link, parse_link_spec, place_blocks

TRANSPORTS = LAUNCHED  # comm/registry.py
MAX_RANKS = 64


Bind = Literal["auto", "core", "none"]


@dataclass(frozen=True)
class Scenario:
    name: str  # the run's name (run directory runs/TIME-NAME, reports); default: the file's name
    # the function every rank runs, module:function (":main" may be left out); the module's `Params`
    # are the keys of `params:`
    node: str
    ranks: int = 2  # processes started (1-64; --ranks overrides); some nodes need a given count
    # how ranks exchange messages (Registries page): ipc (ZeroMQ over Unix sockets, large arrays
    # through /dev/shm rings), tcp (ZeroMQ over TCP), shm (shared-memory mailboxes, no ZeroMQ)
    transport: LaunchedKind = "ipc"
    # seconds a blocking wait (a receive, room to send) may take before the run fails naming what it
    # waited for
    timeout_s: float = 30.0
    # pin each rank to one CPU, as MPI launchers' --bind-to core: core (rank r on the r-th CPU the
    # launcher may use, round-robin), none (the scheduler places and moves ranks), auto (core over shm
    # on one host when every rank has a CPU of its own and the node starts no threads, else none)
    bind: Bind = "auto"
    description: str = ""  # one line, shown by `python -m playground list`
    params: Any = None  # the node's parameters: keys of its `Params` (per node below); left out: defaults
    fault: Fault | None = None  # a failure drill (below); null: none
    recovery: Recovery = Recovery()  # what the launcher does when a rank fails (below): restarts, checkpoints
    # run the ranks on this many emulated hosts (network namespaces, needs root), ranks in consecutive blocks;
    # null: one plain host
    hosts: int | None = None
    link: Link | None = None  # every host's link to the switch (below), when there are hosts
    source: str = ""
    # The function every rank runs, for a run started from Python with a function of its own
    # (`playground.api.launch`); `node` then only names it. Not part of the saved scenario.
    function: Callable | None = None

    @property
    def contract(self) -> NodeContract:
        """The node module's contract (config/node.py); a function run from Python declares none."""
        return NodeContract() if self.function is not None else load_node(self.node).contract

    @property
    def placement(self) -> tuple[int, ...]:
        """The host of each rank (blocks over the emulated hosts; all on host 0 without them)."""
        return place_blocks(self.ranks, self.hosts or 1)

    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "description": self.description,
            "node": self.node,
            "ranks": self.ranks,
            "transport": self.transport,
            "timeout_s": self.timeout_s,
            "bind": self.bind,
            "params": params_to_dict(self.params),
        }
        if self.fault:
            d["fault"] = self.fault.to_dict()
        if not self.recovery.is_default:
            d["recovery"] = self.recovery.to_dict()
        if self.hosts:
            d["hosts"] = self.hosts
            d["link"] = (self.link or Link()).to_dict()
        return d


BINDS: tuple[str, ...] = get_args(Bind)
TOP_KEYS = {f.name for f in dataclasses.fields(Scenario)} - {"source", "function"}


def builtin_dir() -> Path:
    return Path(str(importlib.resources.files("scenarios")))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def find_scenario_file(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.is_file():
        return p
    if p.suffix in (".yaml", ".yml") or "/" in name_or_path:
        raise ScenarioError(f"{name_or_path}: no such scenario file")
    builtin = builtin_dir() / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    names = builtin_names()
    raise ScenarioError(
        f"unknown scenario {name_or_path!r}; {did_you_mean(name_or_path, names)}built-in: {', '.join(names)} "
        "(or give a path to a .yaml file)"
    )


def node_function(scenario: Scenario) -> Callable:
    """What every rank calls as `main(comm, params)`: the scenario's own function, else its node's."""
    return scenario.function or load_node(scenario.node).main


def _check_top(raw: dict, at: Origins) -> None:
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise ScenarioError(
            f"{at(unknown[0])}: unknown key; {did_you_mean(unknown[0], TOP_KEYS)}allowed: {', '.join(sorted(TOP_KEYS))}"
        )
    if not isinstance(raw.get("node"), str) or not raw["node"]:
        raise ScenarioError(f"{at('node')}: required, a string like 'nodes.collective:main'")
    ranks = raw.get("ranks", 2)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise ScenarioError(f"{at('ranks')}: expected an integer from 1 to {MAX_RANKS}, got {ranks!r}")
    if raw.get("transport", "ipc") not in TRANSPORTS:
        raise ScenarioError(
            f"{at('transport')}: expected one of {', '.join(TRANSPORTS)}, got {raw.get('transport')!r}"
        )
    t = raw.get("timeout_s", 30.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise ScenarioError(f"{at('timeout_s')}: expected a positive number of seconds, got {t!r}")
    if raw.get("bind", "auto") not in BINDS:
        raise ScenarioError(f"{at('bind')}: expected one of {', '.join(BINDS)}, got {raw.get('bind')!r}")
    for k in ("name", "description"):
        if k in raw and not isinstance(raw[k], str):
            raise ScenarioError(f"{at(k)}: expected a string, got {raw[k]!r}")
    hosts = raw.get("hosts")
    if hosts is not None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= ranks:
            raise ScenarioError(
                f"{at('hosts')}: expected an integer from 1 to the rank count ({ranks}), got {hosts!r}"
            )
        transport = raw.get("transport", "ipc")
        if not BY_NAME[transport].crosses_hosts:
            raise ScenarioError(
                f"{at('transport')}: with hosts, ranks talk ipc inside a host (or tcp everywhere "
                f"with transport: tcp) and tcp across hosts; {transport} is one host only"
            )
    elif raw.get("link") is not None:
        raise ScenarioError(f"{at('link')}: needs hosts (e.g. --hosts 2 or hosts: 2)")


def load_scenario(
    name_or_path: str,
    ranks: int | None = None,
    transport: str | None = None,
    overrides: Sequence[str] = (),
    hosts: int | None = None,
    link: str | None = None,
    values: Mapping[str, Any] | None = None,
    said: dict[str, str] | None = None,
) -> Scenario:
    """The validated scenario NAME_OR_PATH with the command line's values applied over the file's.
    `overrides` are --set texts ("params.iters=5", the value YAML); `values` the same already
    parsed ({"params.iters": 5}: the Python API's keywords), applied after them.

    A bad value is blamed on where it came from: `run`'s flag of the same name (`--ranks`,
    `--transport`, `--hosts`, `--link`, `--set TEXT`; a `values` entry as the --set it stands for),
    or what `said` maps the argument's name or the override's text to when the user typed
    something else (`{"ranks": "WORLD_SIZE"}`, `{"params.inplace=true": "--inplace"}`); the file's
    own values, by file and key."""
    path = find_scenario_file(name_or_path)
    file_raw = _read_yaml(path)
    raw, at = copy.deepcopy(file_raw), Origins(str(path), file_raw)
    flags = {"ranks": ranks, "transport": transport, "hosts": hosts}
    apply_command_line(raw, at, overrides, values or {}, flags, link, said or {})
    raw.setdefault("name", path.stem)
    raw.setdefault("ranks", 2)
    _check_top(raw, at)
    return _validated(raw, at)


def _read_yaml(path: Path) -> dict:
    """The scenario file's mapping; ScenarioError (with the line) if it is no YAML mapping."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{path}:{where} invalid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: expected a mapping of keys (name, node, ranks, params, ...)")
    return raw


def _validated(raw: dict, at: Origins) -> Scenario:
    """The checked top-level mapping `raw` as a Scenario: the node's params and checks (its
    contract), the fault drill, the link; a bad value blamed by `at`."""
    contract = load_node(raw["node"], where=at("node")).contract
    try:
        params = contract.build_params(raw.get("params"))
    except ParamError as e:
        raise ScenarioError(f"{at(f'params.{e.field}')}: {e.message}") from None
    try:
        fault = build_params(Fault, raw["fault"]) if raw.get("fault") else None
    except ParamError as e:
        raise ScenarioError(f"{at(f'fault.{e.field}')}: {e.message}") from None
    try:
        recovery = build_params(Recovery, raw.get("recovery") or {})
    except ParamError as e:
        raise ScenarioError(f"{at(f'recovery.{e.field}')}: {e.message}") from None
    link = _build_link(raw.get("link"), at) if raw.get("hosts") else None
    if fault:
        check_fault(fault, raw["ranks"], raw.get("hosts"), at)
    try:
        contract.check(params, raw["ranks"])
        contract.check_recovery(params, raw["ranks"], recovery.way)
        if recovery.way != "restart" and raw.get("hosts"):
            raise ParamError("recovery.way", f"{recovery.way} runs on one host (no hosts:); allowed: restart")
    except ParamError as e:
        raise ScenarioError(f"{at(e.field)}: {e.message}") from None
    return Scenario(
        name=raw["name"],
        node=raw["node"],
        ranks=raw["ranks"],
        transport=raw.get("transport", "ipc"),
        timeout_s=float(raw.get("timeout_s", 30.0)),
        bind=cast(Bind, raw.get("bind", "auto")),  # one of BINDS: _check_top checked it
        description=raw.get("description", ""),
        params=params,
        fault=fault,
        recovery=recovery,
        hosts=raw.get("hosts"),
        link=link,
        source=at.src,
    )


def function_scenario(
    function: Callable,
    ranks: int,
    params: dict | None = None,
    transport: str = "ipc",
    timeout_s: float = 30.0,
    name: str | None = None,
    bind: str = "auto",
) -> Scenario:
    """A scenario whose ranks run `function(comm, params)` (`playground.api.launch`), checked as a
    file's would be. `params` is a plain mapping, saved in scenario.yaml as it is: data a rank needs
    that is not plain (an array, an object) travels in the function's closure instead."""
    if not callable(function):
        raise ScenarioError(f"launch: expected a function main(comm, params), got {function!r}")
    label = getattr(function, "__qualname__", type(function).__name__)
    if name is None:  # the run directory's: my_rank, or launch for a lambda
        short = getattr(function, "__name__", "")
        name = short if short.isidentifier() else "launch"
    src = f"launch({name})"
    if params is not None and not isinstance(params, dict):
        raise ScenarioError(f"{src}: key 'params': expected a mapping (a dict), got {params!r}")
    try:
        yaml.safe_dump(params)
    except yaml.YAMLError as e:
        raise ScenarioError(
            f"{src}: key 'params': plain data only (numbers, strings, lists, dicts), as a scenario "
            f"file holds; pass other objects in the function's closure ({e})"
        ) from None
    node = f"{getattr(function, '__module__', None) or '__main__'}:{label}"
    raw = {
        "name": name,
        "node": node,
        "ranks": ranks,
        "transport": transport,
        "timeout_s": timeout_s,
        "bind": bind,
    }
    _check_top(raw, Origins(src, raw))
    if not name or "/" in name or name.startswith("."):
        raise ScenarioError(f"{src}: key 'name': a run directory's name, without '/', got {name!r}")
    return Scenario(
        name=name,
        node=node,
        ranks=ranks,
        transport=transport,
        timeout_s=float(timeout_s),
        bind=cast(Bind, bind),  # one of BINDS: _check_top checked it
        params=dict(params or {}),
        source=src,
        function=function,
    )


def _build_link(raw_link, at: Origins) -> Link:
    """`link:` as a mapping {rate, delay}, or the command line's form `1gbit,delay=200us`."""
    if isinstance(raw_link, str):
        try:
            raw_link = parse_link_spec(raw_link)
        except ValueError as e:
            raise ScenarioError(f"{at('link')}: {e}") from None
    if raw_link is not None and not isinstance(raw_link, dict):
        raise ScenarioError(
            f"{at('link')}: expected a mapping {{rate: 1gbit, delay: 200us}} or a string "
            f"like 1gbit,delay=200us, got {raw_link!r}"
        )
    try:
        return build_params(Link, raw_link)
    except ParamError as e:
        raise ScenarioError(f"{at(f'link.{e.field}')}: {e.message}") from None
