"""Turns a scenario's raw `params:` mapping into a node's frozen `Params` dataclass.

A node declares its parameters as a frozen dataclass with typed fields (int, float, str, bool,
Literal[...], Size, Rate, Duration, tuple[X, ...], X | None, dict). `build_params` checks every key and value
before any process starts, so a typo is one clear line, never a crash inside rank 5. A node may
add a `__post_init__` that raises `ParamError(field, message)` for checks across fields; any other
exception there is a bug in the node and surfaces as one.
"""

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from playground.core.errors import ParamError
from playground.core.sizes import (
    ALLOWED_DURATION,
    ALLOWED_RATE,
    ALLOWED_SIZE,
    Duration,
    Rate,
    Size,
    parse_duration,
    parse_rate,
    parse_size,
)
from playground.core.suggest import did_you_mean

_PARSERS = {Size: parse_size, Rate: parse_rate, Duration: parse_duration}


def describe_type(tp: Any) -> str:
    """What a value of type `tp` may be, in words (errors and the scenario reference say it)."""
    origin = get_origin(tp)
    if tp is Size:
        return ALLOWED_SIZE
    if tp is Rate:
        return ALLOWED_RATE
    if tp is Duration:
        return ALLOWED_DURATION
    if hasattr(tp, "ALLOWED"):
        return tp.ALLOWED
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (tuple, list):
        return f"a list of {describe_type(get_args(tp)[0])}"
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def coerce(tp: Any, value: Any, key: str) -> Any:
    """`value` converted to type `tp`, or ParamError naming `key` and what is allowed."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if tp in _PARSERS or parses_itself(tp):  # a type that parses itself: LinkSpec, a training Mode
        try:
            return _PARSERS[tp](value) if tp in _PARSERS else tp.parse_param(value)
        except ValueError as e:
            raise ParamError(key, f"{value}: {e}" if parses_itself(tp) else str(e)) from None
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise ParamError(key, f"expected {describe_type(tp)}, got {value!r}")
    if origin in (Union, types.UnionType):
        return _coerce_union(tp, value, key)
    if origin in (tuple, list):
        return _coerce_sequence(tp, value, key)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ParamError(key, f"expected a mapping, got {value!r}")
        return value
    if tp in _SCALARS:
        return _SCALARS[tp](value, key)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build_params(tp, value, prefix=f"{key}.")
    raise ParamError(key, f"unsupported parameter type {tp!r}")


def _coerce_union(tp: Any, value: Any, key: str) -> Any:
    """`X | Y | None`: None if allowed, else the first member the value converts to."""
    if value is None and type(None) in get_args(tp):
        return None
    choices = [a for a in get_args(tp) if a is not type(None)]
    if len(choices) == 1 and parses_itself(choices[0]):  # its own error says more
        return coerce(choices[0], value, key)
    for arg in choices:
        try:
            return coerce(arg, value, key)
        except ParamError:
            pass
    raise ParamError(key, f"expected {describe_type(tp)}, got {value!r}")


def _coerce_sequence(tp: Any, value: Any, key: str) -> tuple:
    """`tuple[X, ...]` (one value alone is a list of one), or a fixed `tuple[X, Y, Z]`."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ParamError(key, f"expected {describe_type(tp)}, got {value!r}")
    args = get_args(tp)
    if get_origin(tp) is tuple and len(args) != 2 and args:
        return tuple(coerce(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    item = args[0] if args else Any
    return tuple(coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value))


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ParamError(key, f"expected true or false, got {value!r}")


def _as_int(value: Any, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ParamError(key, f"expected an integer, got {value!r}")


def _as_float(value: Any, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ParamError(key, f"expected a number, got {value!r}")


def _as_str(value: Any, key: str) -> str:
    if isinstance(value, str):
        return value
    raise ParamError(key, f"expected a string, got {value!r}")


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    bool: _as_bool,
    int: _as_int,
    float: _as_float,
    str: _as_str,
}


def build_params(cls: type, raw: dict | None, prefix: str = "") -> Any:
    """An instance of dataclass `cls` from `raw`; unknown keys and bad values raise ParamError."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ParamError(prefix.rstrip(".") or "params", f"expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ParamError(
            prefix + str(unknown[0]),
            f"unknown key; {did_you_mean(unknown[0], fields)}allowed: {', '.join(sorted(fields))}",
        )
    values = {name: coerce(hints[name], raw[name], prefix + name) for name in raw}
    try:
        return cls(**values)
    except ParamError as e:  # raised by the dataclass's __post_init__, relative to it
        raise ParamError(prefix + e.field, e.message) from None
    except TypeError as e:  # a required field is missing
        raise ParamError(prefix.rstrip(".") or "params", str(e)) from None


def parses_itself(tp: Any) -> bool:
    """A type that turns a scenario's value into itself (`parse_param`) and back (`to_param`): one
    value, never a mapping of keys, even when it is a dataclass (a training `Mode`)."""
    return hasattr(tp, "parse_param")


def plain_value(v: Any) -> Any:
    """The JSON/YAML-friendly form of a parameter's value: tuples become lists, dataclasses
    mappings, a value that parses itself what a scenario says (`to_param`)."""
    if hasattr(v, "to_param"):
        return v.to_param()
    if isinstance(v, tuple):
        return [plain_value(x) for x in v]
    if dataclasses.is_dataclass(v):
        return {f.name: plain_value(getattr(v, f.name)) for f in dataclasses.fields(v)}
    return int(v) if isinstance(v, Size) else v


def params_to_dict(params: Any) -> dict:
    """The JSON/YAML-friendly form of a params dataclass (tuples become lists)."""
    if params is None:
        return {}
    if isinstance(params, dict):
        return params
    return {f.name: plain_value(getattr(params, f.name)) for f in dataclasses.fields(params)}
