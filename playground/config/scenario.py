"""YAML scenario -> validated, frozen `Scenario`; the one place config is resolved.

Precedence is fixed: command line (--ranks, --transport, --set) > file > defaults. Everything is
checked here, before any process starts; a problem is a ScenarioError naming where the value came
from (the file and key, or the flag that overrode it: `--ranks`, `--set params.iters=0`) and what
is allowed.
"""

import copy
import dataclasses
import importlib
import importlib.resources
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from playground.comm.registry import LAUNCHED
from playground.config.params import build_params, params_to_dict
from playground.core.errors import ParamError, ScenarioError
from playground.core.sizes import Duration, format_duration
from playground.core.suggest import did_you_mean
from playground.core.topology import Link, parse_link_spec, place_blocks, ranks_on

TRANSPORTS = LAUNCHED  # comm/registry.py
MAX_RANKS = 64


RANK_ACTIONS = ("raise", "kill", "hang", "exit", "corrupt", "slow")
HOST_ACTIONS = ("cut_link", "delay_link", "kill_host")


@dataclass(frozen=True)
class Fault:
    """Make one rank, or one host of an emulated cluster, fail on purpose (a drill).

    Rank actions need `rank` and fire on its post number `after_ops + 1`: raise, kill, hang, exit,
    corrupt (flip one bit of the next array it sends, which the collectives' check must catch), or
    slow (from then on the rank's own work, its compute and what it does between messages, takes
    `factor` times as long: a straggler, which the run's report must name).
    Host actions need `hosts:` and name the host by `host`, or by `rank` (that rank's host):
      cut_link    take the host's link down, `after_s` seconds after every rank registered or on post
                  `after_ops + 1` of `rank` (default: the host's first rank)
      kill_host   SIGKILL every rank of the host, triggered the same way
      delay_link  add `delay` to every message to or from the host, from `after_s` on
    """

    # rank actions: the rank that fails (required). Host actions: its host is the one hit (unless
    # `host` says), and its posts are counted (default: the host's first rank)
    rank: int | None = None
    # what happens (above): raise FaultInjected, SIGKILL itself, hang, exit with status 3, flip a bit
    # of its next array (corrupt), work `factor` times slower (slow); cut_link, delay_link, kill_host
    # act on a host
    action: Literal[
        "raise", "kill", "hang", "exit", "corrupt", "slow", "cut_link", "delay_link", "kill_host"
    ] = "raise"
    # fire on the counting rank's post number after_ops + 1 (a post: an array or object it sends;
    # 0: its first)
    after_ops: int = 0
    # cut_link, kill_host: fire this many seconds after every rank registered, not on a post;
    # delay_link: start then (null: at once)
    after_s: float | None = None
    host: int | None = None  # host actions: the host (0 to hosts - 1); null: the host of `rank`
    delay: Duration | None = None  # delay_link: added to every message to or from the host (e.g. 50ms)
    factor: float | None = None  # slow: how many times longer the rank's own work takes (> 1, e.g. 2)

    def __post_init__(self):
        if self.after_ops < 0:
            raise ParamError("after_ops", f"must be >= 0, got {self.after_ops}")
        if self.after_s is not None and self.after_s < 0:
            raise ParamError("after_s", f"must be >= 0, got {self.after_s}")
        if self.action == "slow" and (self.factor is None or not self.factor > 1):
            raise ParamError(
                "factor", f"action slow needs a factor > 1 (e.g. 2: twice as slow), got {self.factor}"
            )
        if self.factor is not None and self.action != "slow":
            raise ParamError("factor", f"only for action slow, not {self.action}")
        if self.action in RANK_ACTIONS:
            if self.rank is None:
                raise ParamError("rank", f"required for action {self.action}")
            for key in ("after_s", "host", "delay"):
                if getattr(self, key) is not None:
                    raise ParamError(key, f"only for the host actions {', '.join(HOST_ACTIONS)}")
            return
        if self.rank is None and self.host is None:
            raise ParamError("host", f"required for action {self.action} (or rank: that rank's host)")
        if self.action == "delay_link":
            if self.delay is None:
                raise ParamError("delay", "required for action delay_link, e.g. 50ms")
            if self.after_ops:
                raise ParamError("after_ops", "delay_link starts after after_s seconds, not after operations")
        elif self.delay is not None:
            raise ParamError("delay", f"only for action delay_link, not {self.action}")
        if self.after_s is not None and self.after_ops:
            raise ParamError("after_s", "give after_s or after_ops, not both")

    @property
    def is_host_action(self) -> bool:
        return self.action in HOST_ACTIONS

    def target_host(self, placement: tuple[int, ...]) -> int:
        return self.host if self.host is not None else placement[self.rank]

    def counting_rank(self, placement: tuple[int, ...]) -> int | None:
        """The rank whose posts trigger the fault; None when it is timed (after_s) instead."""
        if self.is_host_action and (self.after_s is not None or self.action == "delay_link"):
            return None
        return self.rank if self.rank is not None else ranks_on(placement, self.target_host(placement))[0]

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if self.delay is not None:
            d["delay"] = format_duration(self.delay)
        return d


@dataclass(frozen=True)
class Scenario:
    name: str  # the run's name (run directory runs/TIME-NAME, reports); default: the file's name
    # the function every rank runs, module:function (":main" may be left out); the module's `Params`
    # are the keys of `params:`
    node: str
    ranks: int = 2  # processes started (1-64; --ranks overrides); some nodes need a given count
    # how ranks exchange messages (Registries page): ipc (ZeroMQ over Unix sockets, large arrays
    # through /dev/shm rings), tcp (ZeroMQ over TCP), shm (shared-memory mailboxes, no ZeroMQ)
    transport: Literal[LAUNCHED] = "ipc"
    # seconds a blocking wait (a receive, room to send) may take before the run fails naming what it
    # waited for
    timeout_s: float = 30.0
    # pin each rank to one CPU, as MPI launchers' --bind-to core: core (rank r on the r-th CPU the
    # launcher may use, round-robin), none (the scheduler places and moves ranks), auto (core over shm
    # on one host when every rank has a CPU of its own and the node starts no threads, else none)
    bind: Literal["auto", "core", "none"] = "auto"
    description: str = ""  # one line, shown by `python -m playground list`
    params: Any = None  # the node's parameters: keys of its `Params` (per node below); left out: defaults
    fault: Fault | None = None  # a failure drill (below); null: none
    # run the ranks on this many emulated hosts (network namespaces, needs root), ranks in consecutive blocks;
    # null: one plain host
    hosts: int | None = None
    link: Link | None = None  # every host's link to the switch (below), when there are hosts
    source: str = ""
    # The function every rank runs, for a run started from Python with a function of its own
    # (`playground.api.launch`); `node` then only names it. Not part of the saved scenario.
    function: Callable | None = None

    @property
    def placement(self) -> tuple[int, ...] | None:
        """The host of each rank (blocks), when the run has emulated hosts."""
        return place_blocks(self.ranks, self.hosts) if self.hosts else None

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
        if self.hosts:
            d["hosts"] = self.hosts
            d["link"] = (self.link or Link()).to_dict()
        return d


BINDS = ("auto", "core", "none")
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


def _as_typed(value: Any) -> str:
    """A parsed value as one types it after `--set KEY=` (YAML flow, no space after a comma):
    [8, '1XB'] -> [8,1XB], so the Python API's error names the --set the command line's would."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return text.removesuffix("\n...").replace(", ", ",")


def apply_override(raw: dict, path: list[str], value: Any) -> None:
    node = raw
    for part in path[:-1]:
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ScenarioError(f"--set {'.'.join(path)}: {part!r} is not a mapping")
        node = node[part]
    node[path[-1]] = value


def node_function(scenario: Scenario) -> Callable:
    """What every rank calls as `main(comm, params)`: the scenario's own function, else its node's."""
    return scenario.function or load_node(scenario.node)[1]


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


class _Origins:
    """Where each key's value came from, so that an error names what the user typed: the file and
    key, or the command-line flag that overrode it (the deepest key a flag set wins). A key nobody
    gave (a required one missing) in a section the file does not have is blamed on the flag that
    made the section (`--set fault.action=kill: key 'fault.rank': required ...`)."""

    def __init__(self, src: str, file_raw: dict):
        self.src = src
        self.file_sections = set(file_raw)
        self.flags: dict[str, str] = {}

    def given(self, key: str, flag: str) -> None:
        self.flags = {k: f for k, f in self.flags.items() if not k.startswith(key + ".")}
        self.flags[key] = flag

    def __call__(self, key: str) -> str:
        """`--ranks`, `--set params.iters=0` (with the key when the flag does not show it, as in
        `--link: key 'link.rate'`), or `FILE: key 'params.iters'`."""
        parts = re.sub(r"\[\d+\]", "", key).split(".")
        prefixes = (".".join(parts[:i]) for i in range(len(parts), 0, -1))  # the deepest first
        flag = next((self.flags[k] for k in prefixes if k in self.flags), None)
        if flag is None and parts[0] not in self.file_sections:
            flag = next((f for k, f in self.flags.items() if k.startswith(parts[0] + ".")), None)
        if flag is None:
            return f"{self.src}: key {key!r}"
        shown = flag == f"--{key}" or flag.startswith(f"--set {key}=")
        return flag if shown else f"{flag}: key {key!r}"


def _check_top(raw: dict, at: _Origins) -> None:
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
        if raw.get("transport", "ipc") == "shm":
            raise ScenarioError(
                f"{at('transport')}: with hosts, ranks talk ipc inside a host (or tcp everywhere "
                f"with transport: tcp) and tcp across hosts; shm is one host only"
            )
    elif raw.get("link") is not None:
        raise ScenarioError(f"{at('link')}: needs hosts (e.g. --hosts 2 or hosts: 2)")


def load_scenario(
    name_or_path: str,
    ranks: int | None = None,
    transport: str | None = None,
    overrides: list[str] = (),
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
    said = said or {}
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
    raw, at = copy.deepcopy(raw), _Origins(src, raw)
    for text in overrides:
        keypath, value = parse_override(text)
        apply_override(raw, keypath, value)
        at.given(".".join(keypath), said.get(text, f"--set {text}"))
    for key, value in (values or {}).items():
        apply_override(raw, key.split("."), value)
        at.given(key, f"--set {key}={_as_typed(value)}")  # a keyword of the API is a --set
    for key, value in (("ranks", ranks), ("transport", transport), ("hosts", hosts)):
        if value is not None:
            raw[key] = value
            at.given(key, said.get(key, f"--{key}"))
    if link is not None:
        try:
            spec = parse_link_spec(link)
        except ValueError as e:
            raise ScenarioError(str(e)) from None
        if not raw.get("link"):
            at.given("link", said.get("link", "--link"))
        for key in spec:
            at.given(f"link.{key}", said.get("link", "--link"))
        raw["link"] = {**(raw.get("link") or {}), **spec}
    raw.setdefault("name", path.stem)
    raw.setdefault("ranks", 2)
    _check_top(raw, at)
    module, _ = load_node(raw["node"], where=at("node"))
    params_cls = getattr(module, "Params", None)
    try:
        params = build_params(params_cls, raw.get("params"), "") if params_cls else (raw.get("params") or {})
    except ParamError as e:
        raise ScenarioError(f"{at(f'params.{e.field}')}: {e.message}") from None
    try:
        fault = build_params(Fault, raw["fault"]) if raw.get("fault") else None
    except ParamError as e:
        raise ScenarioError(f"{at(f'fault.{e.field}')}: {e.message}") from None
    link = _build_link(raw.get("link"), at) if raw.get("hosts") else None
    if fault:
        _check_fault(fault, raw["ranks"], raw.get("hosts"), at)
    checks = [getattr(module, "RANKS", None) and module.RANKS.check, getattr(module, "check_scenario", None)]
    for check, args in zip(checks, [(raw["ranks"],), (params, raw["ranks"])], strict=True):
        try:
            if check:
                check(*args)
        except ParamError as e:
            raise ScenarioError(f"{at(e.field)}: {e.message}") from None
    return Scenario(
        name=raw["name"],
        node=raw["node"],
        ranks=raw["ranks"],
        transport=raw.get("transport", "ipc"),
        timeout_s=float(raw.get("timeout_s", 30.0)),
        bind=raw.get("bind", "auto"),
        description=raw.get("description", ""),
        params=params,
        fault=fault,
        hosts=raw.get("hosts"),
        link=link,
        source=src,
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
    raw = {
        "name": name,
        "node": f"{getattr(function, '__module__', None) or '__main__'}:{label}",
        "ranks": ranks,
        "transport": transport,
        "timeout_s": timeout_s,
        "bind": bind,
    }
    _check_top(raw, _Origins(src, raw))
    if not name or "/" in name or name.startswith("."):
        raise ScenarioError(f"{src}: key 'name': a run directory's name, without '/', got {name!r}")
    return Scenario(
        name=name,
        node=raw["node"],
        ranks=ranks,
        transport=transport,
        timeout_s=float(timeout_s),
        bind=bind,
        params=dict(params or {}),
        source=src,
        function=function,
    )


def _build_link(raw_link, at: _Origins) -> Link:
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


def _check_fault(fault: Fault, ranks: int, hosts: int | None, at: _Origins) -> None:
    if fault.rank is not None and not 0 <= fault.rank < ranks:
        raise ScenarioError(f"{at('fault.rank')}: expected 0..{ranks - 1}, got {fault.rank}")
    if not fault.is_host_action:
        return
    if not hosts:
        raise ScenarioError(f"{at('fault.action')}: {fault.action} needs hosts (e.g. --hosts 2)")
    if fault.host is not None and not 0 <= fault.host < hosts:
        raise ScenarioError(f"{at('fault.host')}: expected 0..{hosts - 1}, got {fault.host}")
    placement = place_blocks(ranks, hosts)
    if fault.rank is not None and fault.host is not None and placement[fault.rank] != fault.host:
        raise ScenarioError(
            f"{at('fault.host')}: rank {fault.rank} is on host {placement[fault.rank]}, not {fault.host}"
        )
