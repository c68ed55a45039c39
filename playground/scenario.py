"""YAML scenario -> validated, frozen `Scenario`; the one place config is resolved.

Precedence is fixed: command line (--ranks, --transport, --set) > file > defaults. Everything is
checked here, before any process starts; a problem is a ScenarioError naming file, key and what
is allowed.
"""

import copy
import dataclasses
import importlib
import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from playground.errors import ParamError, ScenarioError
from playground.params import build_params, params_to_dict

TRANSPORTS = ("ipc", "tcp", "shm")
MAX_RANKS = 64


@dataclass(frozen=True)
class Fault:
    """Make one rank fail on purpose after `after_ops` communication operations (for drills);
    `corrupt` flips one bit of the next array it sends, which the collectives' check must catch."""

    rank: int
    action: Literal["raise", "kill", "hang", "exit", "corrupt"] = "raise"
    after_ops: int = 0

    def __post_init__(self):
        if self.after_ops < 0:
            raise ParamError("after_ops", f"must be >= 0, got {self.after_ops}")


@dataclass(frozen=True)
class Scenario:
    name: str
    node: str
    ranks: int = 2
    transport: Literal["ipc", "tcp", "shm"] = "ipc"
    timeout_s: float = 30.0
    description: str = ""
    params: Any = None
    fault: Fault | None = None
    source: str = ""

    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "description": self.description,
            "node": self.node,
            "ranks": self.ranks,
            "transport": self.transport,
            "timeout_s": self.timeout_s,
            "params": params_to_dict(self.params),
        }
        if self.fault:
            d["fault"] = dataclasses.asdict(self.fault)
        return d


_TOP_KEYS = {f.name for f in dataclasses.fields(Scenario)} - {"source"}


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
    raise ScenarioError(
        f"unknown scenario {name_or_path!r}; built-in: {', '.join(builtin_names())} (or give a path to a .yaml file)"
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """'params.sizes=[8,1KiB]' -> (['params', 'sizes'], [8, '1KiB']); values are YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"--set {text!r}: expected KEY=VALUE, e.g. params.iters=10")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip().split("."), parsed


def apply_override(raw: dict, path: list[str], value: Any) -> None:
    node = raw
    for part in path[:-1]:
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ScenarioError(f"--set {'.'.join(path)}: {part!r} is not a mapping")
        node = node[part]
    node[path[-1]] = value


def load_node(spec: str, where: str = "node") -> tuple[Any, Any]:
    """('pkg.mod:func') -> (module, function); ScenarioError if it cannot be imported."""
    mod_name, sep, func_name = spec.partition(":")
    func_name = func_name or "main"
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise ScenarioError(f"{where}: cannot import node module {mod_name!r} ({e})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ScenarioError(f"{where}: module {mod_name!r} has no function {func_name!r}")
    return module, func


def _check_top(raw: dict, src: str) -> None:
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise ScenarioError(
            f"{src}: key {unknown[0]!r}: unknown key; allowed: {', '.join(sorted(_TOP_KEYS))}"
        )
    if not isinstance(raw.get("node"), str) or not raw["node"]:
        raise ScenarioError(f"{src}: key 'node': required, a string like 'nodes.collective:main'")
    ranks = raw.get("ranks", 2)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise ScenarioError(f"{src}: key 'ranks': expected an integer from 1 to {MAX_RANKS}, got {ranks!r}")
    if raw.get("transport", "ipc") not in TRANSPORTS:
        raise ScenarioError(
            f"{src}: key 'transport': expected one of {', '.join(TRANSPORTS)}, got {raw.get('transport')!r}"
        )
    t = raw.get("timeout_s", 30.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise ScenarioError(f"{src}: key 'timeout_s': expected a positive number of seconds, got {t!r}")
    for k in ("name", "description"):
        if k in raw and not isinstance(raw[k], str):
            raise ScenarioError(f"{src}: key {k!r}: expected a string, got {raw[k]!r}")


def load_scenario(
    name_or_path: str,
    ranks: int | None = None,
    transport: str | None = None,
    overrides: list[str] = (),
) -> Scenario:
    path = find_scenario_file(name_or_path)
    src = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{src}:{where} invalid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{src}: expected a mapping of keys (name, node, ranks, params, ...)")
    raw = copy.deepcopy(raw)
    for text in overrides:
        keypath, value = parse_override(text)
        apply_override(raw, keypath, value)
    if ranks is not None:
        raw["ranks"] = ranks
    if transport is not None:
        raw["transport"] = transport
    raw.setdefault("name", path.stem)
    _check_top(raw, src)
    module, _ = load_node(raw["node"], where=f"{src}: key 'node'")
    params_cls = getattr(module, "Params", None)
    try:
        params = build_params(params_cls, raw.get("params"), "") if params_cls else (raw.get("params") or {})
    except ParamError as e:
        raise ScenarioError(f"{src}: key 'params.{e.field}': {e.message}") from None
    try:
        fault = build_params(Fault, raw["fault"]) if raw.get("fault") else None
    except ParamError as e:
        raise ScenarioError(f"{src}: key 'fault.{e.field}': {e.message}") from None
    if fault and not 0 <= fault.rank < raw["ranks"]:
        raise ScenarioError(f"{src}: key 'fault.rank': expected 0..{raw['ranks'] - 1}, got {fault.rank}")
    check = getattr(module, "check_scenario", None)
    if check:
        try:
            check(params, raw["ranks"])
        except ParamError as e:
            raise ScenarioError(f"{src}: key '{e.field}': {e.message}") from None
    return Scenario(
        name=raw["name"],
        node=raw["node"],
        ranks=raw["ranks"],
        transport=raw.get("transport", "ipc"),
        timeout_s=float(raw.get("timeout_s", 30.0)),
        description=raw.get("description", ""),
        params=params,
        fault=fault,
        source=src,
    )
