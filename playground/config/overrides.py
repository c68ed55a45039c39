"""The command line's values over a scenario file's, and where each value came from.

`--set KEY=VALUE` texts are parsed here (the value is YAML) and applied to the raw mapping before it
is validated; `Origins` remembers who gave each key, so an error names what the user typed: the file
and key, or the flag that overrode it.
"""

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from playground.core.errors import ScenarioError
from playground.core.topology import parse_link_spec


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


def as_typed(value: Any) -> str:
    """A parsed value as one types it after `--set KEY=` (YAML flow, no space after a comma):
    [8, '1XB'] -> [8,1XB], so the Python API's error names the --set the command line's would."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return text.removesuffix("\n...").replace(", ", ",")


def apply_command_line(
    raw: dict,
    at: "Origins",
    overrides: Iterable[str],
    values: Mapping[str, Any],
    flags: Mapping[str, Any],
    link: str | None,
    said: Mapping[str, str],
) -> None:
    """The command line's values over a scenario file's mapping `raw`, in the order of precedence:
    --set texts (`overrides`), then the Python API's parsed keywords (`values`, each blamed as the
    --set it stands for), then `run`'s own flags (`flags`: ranks, transport, hosts; None: not
    given), then --link, merged into the file's link. `at` remembers who gave each key: the flag,
    or what `said` maps the flag's name or the override's text to when the user typed something else."""
    for text in overrides:
        keypath, value = parse_override(text)
        apply_override(raw, keypath, value)
        at.given(".".join(keypath), said.get(text, f"--set {text}"))
    for key, value in values.items():
        apply_override(raw, key.split("."), value)
        at.given(key, f"--set {key}={as_typed(value)}")  # a keyword of the API is a --set
    for key, value in flags.items():
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


def apply_override(raw: dict, path: list[str], value: Any) -> None:
    node = raw
    for part in path[:-1]:
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ScenarioError(f"--set {'.'.join(path)}: {part!r} is not a mapping")
        node = node[part]
    node[path[-1]] = value


class Origins:
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
