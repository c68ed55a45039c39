"""The Python API's keywords, turned into what the command line would have been given.

`run`: a keyword is a `--set`. A key with a dot is a path from the top of the scenario
(`**{"fault.rank": 1}` is `--set fault.rank=1`), a top-level key of a scenario goes there by name
(`timeout_s=10`, `fault={...}`, `name=...`), and anything else is a key of `params`
(`sizes=["8", "1MiB"]` is `--set params.sizes=[8,1MiB]`); `params={...}` sets keys of params
explicitly (one whose name is also a top-level key). Values are Python values, not YAML text.

`bench` and `simulate`: a keyword is the command's flag (`algo="ring,tree"` is `--algo ring,tree`,
`no_check=True` is `--no-check`, `data=False` is `--no-data`). A list is written comma-separated,
except for the repeatable flags (`set`, `measured`: one flag per item; `set` also takes a dict);
None leaves the default. The command's own parser reads them, so the defaults, the checks and the
messages are the command line's; what it rejects is a ScenarioError.
"""

import argparse
import json
from typing import Any

from playground.config.scenario import TOP_KEYS
from playground.core.argparser import OneLineParser
from playground.core.errors import ScenarioError

REPEATABLE = ("set", "measured")
_INTERNAL = ("func", "command")  # set by the parser, not flags


def override_values(overrides: dict[str, Any], params: dict | None = None) -> dict[str, Any]:
    """`run`'s keywords -> {dotted key: value}, as `load_scenario(values=...)` takes them."""
    if params is not None and not isinstance(params, dict):
        raise ScenarioError(f"params: expected a mapping (a dict), got {params!r}")
    values = {}
    for key, value in overrides.items():
        values[key if "." in key or key in TOP_KEYS else f"params.{key}"] = value
    for key, value in (params or {}).items():
        values[f"params.{key}"] = value
    return values


class RaisingParser(OneLineParser):
    """The command line's parser, raising a ScenarioError with the line the command would print
    before it exits with status 2."""

    def error(self, message: str):
        raise ScenarioError(self.one_line(message))


def command_args(command: str, positional: list[str], keywords: dict[str, Any]) -> argparse.Namespace:
    """The namespace `python -m playground COMMAND POSITIONAL --flag value ...` parses into."""
    from playground.cli import parse_args

    defaults = vars(parse_args([command, *positional], RaisingParser))
    allowed = sorted(k for k in defaults if k not in _INTERNAL and k not in ("collective",))
    argv, switches = [command, *positional], {}
    for key, value in keywords.items():
        if key not in allowed:
            raise ScenarioError(f"{command}: unknown keyword {key!r}; allowed: {', '.join(allowed)}")
        if value is None:
            continue
        if isinstance(value, bool):
            switches[key] = value  # a store_true/store_false flag: set as the flag would set it
            continue
        argv += _flag(key, value)
    args = parse_args(argv, RaisingParser)
    for key, value in switches.items():
        if not isinstance(defaults[key], bool) and defaults[key] is not None:
            raise ScenarioError(f"{command}: {key}: expected a value like {defaults[key]!r}, got {value!r}")
        setattr(args, key, value)
    return args


def _flag(key: str, value: Any) -> list[str]:
    flag = "--" + key.replace("_", "-")
    if key == "set" and isinstance(value, dict):
        value = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        if key in REPEATABLE:
            return [f"{flag}={v}" for v in value]
        return [f"{flag}={','.join(map(str, value))}"]
    return [f"{flag}={value}"]  # "=": a value that starts with '-' stays a value
