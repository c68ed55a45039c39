"""The Python API's keywords, turned into what the command would have been given.

`run`: a keyword is a `--set`. A key with a dot is a path from the top of the scenario
(`**{"fault.rank": 1}` is `--set fault.rank=1`), a top-level key of a scenario goes there by name
(`timeout_s=10`, `fault={...}`, `name=...`), and anything else is a key of `params`
(`sizes=["8", "1MiB"]` is `--set params.sizes=[8,1MiB]`); `params={...}` sets keys of params
explicitly (one whose name is also a top-level key). Values are Python values, not YAML text.

`bench` and `simulate`: a keyword is the command's flag by its name (`algo="ring,tree"` is
`--algo ring,tree`, `no_check=True` is `--no-check`, `data=False` is `--no-data`), given to the
command's own config (`from_flags`), so the defaults, the checks and the messages are the command
line's. A comma list may be a list (`algo=["ring", "tree"]`), a repeatable flag a list (`measured`)
or, for `set`, a dict; None leaves the default.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from playground.config.scenario import TOP_KEYS
from playground.core.errors import ScenarioError
from playground.core.flags import defaults
from playground.core.flags import switches as switches_of

Config = TypeVar("Config")


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


def configure(command: str, make: Callable[..., Config], keywords: dict[str, Any]) -> Config:
    """The config `python -m playground COMMAND --flag value ...` builds (`make`, the command's
    `from_flags`) from these keywords; an unknown keyword is bad input that lists the flags."""
    flags, switches = defaults(make), switches_of(make)
    for key, value in keywords.items():
        if key not in flags:
            raise ScenarioError(f"{command}: unknown keyword {key!r}; allowed: {', '.join(sorted(flags))}")
        if value is not None and isinstance(value, bool) != (key in switches):
            like = "True or False" if key in switches else f"a value like {flags[key]!r}"
            raise ScenarioError(f"{command}: {key}: expected {like}, got {value!r}")
    return make(**{k: v for k, v in keywords.items() if v is not None})
