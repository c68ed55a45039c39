"""The one place that parses and formats sizes and units: byte counts ("64KiB", "1MiB", 8), the
link units of emulated hosts, bit rates as tc writes them ("100mbit", "1gbit") and durations
("200us", "1ms"), and bandwidths in bytes per second ("50GB/s", or a bit rate divided by 8).

A value the parsers do not take raises UsageError, a ValueError: callers catch that and report it
as a ParamError or ScenarioError naming the key or flag the value came from.
"""

import re
from typing import TYPE_CHECKING

from playground.core.errors import UsageError

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


if TYPE_CHECKING:
    # To the type checker a parameter annotated Size, Rate or Duration holds the plain number
    # `build_params` leaves in it; the classes below exist for `build_params` to tell them apart.
    Size = int
    Rate = int
    Duration = float
else:

    class Size(int):
        """Annotation marker: a parameter holding a byte count parsed by `parse_size`."""

    class Rate(int):
        """Annotation marker: a parameter holding a rate in bits per second, parsed by `parse_rate`."""

    class Duration(float):
        """Annotation marker: a parameter holding a duration in seconds, parsed by `parse_duration`."""


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


ALLOWED_RATE = "a rate in bits per second such as 100mbit, 1gbit, 10gbit (kbit/mbit/gbit = 1000s, as tc)"
ALLOWED_DURATION = "a duration such as 0, 200us, 1.5ms, 2s (units ns, us, ms, s)"
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_PER_SECOND = {"ns": 1e9, "us": 1e6, "ms": 1e3, "s": 1.0}  # divide: 200 / 1e6 is exactly 0.0002
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_rate(value: int | str) -> int:
    """Bits per second from "100mbit", "1gbit", "1.5gbit" or a plain integer; ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _NUMBER_UNIT.match(value) if isinstance(value, str) else None
    if not m or m.group(2).lower() not in _RATE_UNITS:
        raise UsageError(f"expected {ALLOWED_RATE}, got {value!r}")
    bits = round(float(m.group(1)) * _RATE_UNITS[m.group(2).lower()])
    if bits <= 0:
        raise UsageError(f"expected a positive rate, got {value!r}")
    return bits


def parse_duration(value: int | float | str) -> float:
    """Seconds from "200us", "1.5ms", "2s"; a bare number is accepted only when it is 0 (which unit
    a bare 200 meant is anybody's guess)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    m = _NUMBER_UNIT.match(value) if isinstance(value, str) else None
    if m and not m.group(2) and float(m.group(1)) == 0:
        return 0.0
    if not m or m.group(2).lower() not in _PER_SECOND:
        raise UsageError(f"expected {ALLOWED_DURATION}, got {value!r}")
    return float(m.group(1)) / _PER_SECOND[m.group(2).lower()]


def format_rate(bits_per_s: float) -> str:
    """Short form, as tc writes it: 100mbit, 1gbit, 2.5gbit."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{unit}"
    return f"{bits_per_s:g}bit"


def format_duration(seconds: float) -> str:
    """Short form: 0, 200us, 1.5ms, 2s."""
    if seconds == 0:
        return "0"
    for unit, per_second in (("s", 1.0), ("ms", 1e3), ("us", 1e6)):
        if seconds * per_second >= 1:
            return f"{seconds * per_second:g}{unit}"
    return f"{seconds * 1e9:g}ns"


ALLOWED_BANDWIDTH = (
    "a bandwidth such as 50GB/s, 12.5GiB/s, 900GB/s (bytes per second) or 100gbit, 1gbit (bits)"
)
_BYTE_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgGtT]?i?)[bB]/s\s*$")


def parse_bandwidth(value: int | float | str) -> float:
    """Bytes per second from "50GB/s", "12.5GiB/s" (1000s, 1024s), a bit rate ("100gbit" / 8) or a
    plain number of bytes per second; UsageError otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value > 0:
            return float(value)
        raise UsageError(f"expected a bandwidth > 0, got {value!r}")
    m = _BYTE_RATE.match(value) if isinstance(value, str) else None
    if m:
        scale = _UNITS.get(m.group(2).lower())
        number = float(m.group(1)) * scale if scale is not None else 0.0
        if number > 0:
            return number
        raise UsageError(f"expected {ALLOWED_BANDWIDTH}, got {value!r}")
    try:
        return parse_rate(value) / 8
    except UsageError:
        raise UsageError(f"expected {ALLOWED_BANDWIDTH}, got {value!r}") from None
