"""The one place that parses and formats byte sizes ("64KiB", "1MiB", 8).

A value the parsers do not take raises UsageError, a ValueError: callers catch that and report it
as a ParamError or ScenarioError naming the key or flag the value came from.
"""

import re

from playground.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
ALLOWED_SIZE = "a byte count such as 8, 4096, 64KiB, 1MiB, 2GiB (K/M/G = 1000s, Ki/Mi/Gi = 1024s)"


class Size(int):
    """Annotation marker: a parameter holding a byte count parsed by `parse_size`."""


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string with an optional unit suffix; UsageError otherwise."""
    if isinstance(value, bool):
        raise UsageError(f"expected {ALLOWED_SIZE}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"expected a non-negative size, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise UsageError(f"expected {ALLOWED_SIZE}, got {value!r}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"expected {ALLOWED_SIZE}, got {value!r}")
    number = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not number.is_integer():
        raise UsageError(f"size {value!r} is not a whole number of bytes")
    return int(number)


def parse_size_range(text: str, step: int = 2) -> list[int]:
    """'8..64MiB' -> 8, 16, ..., 64MiB (times `step` each time, as nccl-tests -b/-e/-f); '8,1KiB' ->
    that list."""
    if step < 2:
        raise UsageError(f"the step between sizes must be at least 2, got {step}")
    if ".." in text:
        lo_s, hi_s = text.split("..", 1)
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        if lo <= 0 or hi < lo:
            raise UsageError(f"size range {text!r} needs 0 < start <= end")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= step
        return out
    return [parse_size(p) for p in text.split(",") if p.strip()]


def format_size(num_bytes: int) -> str:
    """Short human form: 8 B, 64 KiB, 1.5 MiB."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= scale:
            v = num_bytes / scale
            return f"{v:.0f} {unit}" if v.is_integer() else f"{v:.1f} {unit}"
    return f"{num_bytes} B"


_PER_SECOND = {"ns": 1e9, "us": 1e6, "µs": 1e6, "ms": 1e3, "s": 1.0, "": 1.0}  # units in a second
_NUMBER_UNIT_RE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*([a-zA-Zµ/]*)\s*$")
ALLOWED_DURATION = "a time such as 5us, 200ns, 1.5ms, 2s (a bare number is seconds)"
ALLOWED_RATE = "a rate such as 50GB/s, 12.5GiB/s, 900GB/s, 100Gbit, 1gbit, 100mbit (bytes or bits per second)"


def parse_duration(value: float | int | str) -> float:
    """Seconds from a number (seconds) or a string with ns/us/ms/s; UsageError otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _NUMBER_UNIT_RE.match(str(value))
        unit = m.group(2).lower() if m else None
        if unit not in _PER_SECOND:
            raise UsageError(f"expected {ALLOWED_DURATION}, got {value!r}")
        seconds = float(m.group(1)) / _PER_SECOND[unit]
    if not seconds >= 0:
        raise UsageError(f"expected a time >= 0, got {value!r}")
    return seconds


def parse_rate(value: float | int | str) -> float:
    """Bytes per second from a number (bytes/s) or a string: GB/s, GiB/s, MB/s (bytes, 1000s and
    1024s) or gbit, mbit, kbit, bit (bits, 1000s: what `tc` and link speeds say); UsageError otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rate = float(value)
    else:
        m = _NUMBER_UNIT_RE.match(str(value))
        if not m:
            raise UsageError(f"expected {ALLOWED_RATE}, got {value!r}")
        number, unit = float(m.group(1)), m.group(2).lower().removesuffix("/s").removesuffix("ps")
        if unit.endswith("bit"):
            scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}.get(unit[:-3])
            rate = None if scale is None else number * scale / 8
        else:
            scale = _UNITS.get(unit)
            rate = None if scale is None else number * scale
        if rate is None:
            raise UsageError(f"expected {ALLOWED_RATE}, got {value!r}")
    if not rate > 0:
        raise UsageError(f"expected a rate > 0, got {value!r}")
    return rate


def format_duration(seconds: float) -> str:
    """Short human form: 5 us, 1.50 ms, 2.00 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_rate(bytes_per_s: float) -> str:
    """GB/s (1e9 bytes per second, as nccl-tests prints bandwidth)."""
    return f"{bytes_per_s / 1e9:.3g} GB/s"
