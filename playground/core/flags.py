"""A command's flags as the command line and the Python API both give them, on their way into the
command's config.

Each command turns its flags into one frozen config, once (`BenchConfig.from_flags`,
`sim.options.simulate_config`, ...): the command line passes what argparse parsed, the Python API
its keywords, which may be Python values where the command line has text (a list for a comma
list, a dict for repeated `--set KEY=VALUE`). These helpers read either form and say what is wrong
in the command line's words: a value the command line's parser refuses gets the parser's line
(core/argparser.py), any other bad value one line naming the flag.
"""

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from playground.core.argparser import PROG, one_line
from playground.core.errors import ScenarioError
from playground.core.sizes import parse_size_range

Text = str | Iterable[Any]  # a comma list: its text, or a sequence of its items
Repeated = str | Iterable[str] | Mapping[str, Any]  # a repeatable flag's values (--set KEY=VALUE ...)


def comma(value: Text | None) -> str | None:
    """A comma list's text: given as text, or as a sequence of items (`["ring", "tree"]`)."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(map(str, value))


def items(value: Text | None) -> tuple[str, ...]:
    """The non-empty items of a comma list (text or a sequence)."""
    return tuple(v for v in (comma(value) or "").split(",") if v)


def repeated(value: Repeated | None) -> tuple[str, ...]:
    """A repeatable flag's values (`--set a=1 --set b=2`): a list of them, one of them, or for
    KEY=VALUE pairs a mapping (a value that is not text is written as JSON: `[8, "1MiB"]`)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Mapping):
        return tuple(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in value.items())
    return tuple(map(str, value))


def sizes(flag: str, value: Text, step: int = 2) -> tuple[int, ...]:
    """Byte sizes: a range that multiplies by `step` ('8..64MiB') or a comma list ('8,1KiB')."""
    text = comma(value) or ""
    try:
        return tuple(parse_size_range(text, step))
    except ValueError as e:
        raise ScenarioError(f"{flag} {text!r}: {e}") from None


def _refused(command: str, message: str) -> ScenarioError:
    """The line the command line's parser prints for argparse's `message` about a flag of `command`."""
    return ScenarioError(one_line(f"{PROG} {command}", message))


def choice(command: str, flag: str, value: Any, allowed: Iterable[str]) -> str:
    """`value` if it is one of `allowed`, else the error the command line's parser gives for it."""
    allowed = list(allowed)
    if value not in allowed:
        listing = ", ".join(map(repr, allowed))
        raise _refused(command, f"argument {flag}: invalid choice: {value!r} (choose from {listing})")
    return value


def integer(command: str, flag: str, value: Any) -> int:
    """An integer flag's value (an int, or its digits), else the error the parser gives for it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise _refused(command, f"argument {flag}: invalid int value: {value!r}")


def number(command: str, flag: str, value: Any) -> float:
    """A float flag's value, else the error the parser gives for it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _refused(command, f"argument {flag}: invalid float value: {value!r}") from None


def defaults(make: Callable[..., Any]) -> dict[str, Any]:
    """A config factory's flags and their defaults: its keyword parameters."""
    return {
        name: p.default
        for name, p in inspect.signature(make).parameters.items()
        if p.kind == p.KEYWORD_ONLY and p.default is not p.empty
    }


def switches(make: Callable[..., Any]) -> set[str]:
    """The flags of a config factory that are switches (`--no-check`, `--data/--no-data`): typed bool."""
    return {
        name
        for name, p in inspect.signature(make).parameters.items()
        if p.kind == p.KEYWORD_ONLY and p.annotation in (bool, bool | None)
    }


def typed(command: str, given: Mapping[str, Any], make: Callable[..., Any], omit: Iterable[str] = ()) -> str:
    """The command line a reader types for these flags: `python -m playground COMMAND` and each flag
    given a value other than its default (the flag's name from its keyword: `rank_counts` is
    `--rank-counts`), except `omit` (such as where the output goes)."""
    words = ["python -m playground", command]
    for name, default in defaults(make).items():
        value = given.get(name, default)
        if name in omit or value == default or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "")
        elif isinstance(value, (list, tuple)):
            words.append(f"{flag} {comma(value)}")
        else:
            words.append(f"{flag} {value}")
    return " ".join(w for w in words if w)


def integers(flag: str, value: Text) -> tuple[int, ...]:
    """A comma list of integers (text, or a sequence)."""
    text = comma(value) or ""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError as e:
        raise ScenarioError(f"{flag} {text!r}: {e}") from None
