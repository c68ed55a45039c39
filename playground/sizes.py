"""The one place that parses and formats byte sizes ("64KiB", "1MiB", 8)."""

import re

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
    """Bytes from an int or a string with an optional unit suffix; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected {ALLOWED_SIZE}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected {ALLOWED_SIZE}, got {value!r}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected {ALLOWED_SIZE}, got {value!r}")
    number = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not number.is_integer():
        raise ValueError(f"size {value!r} is not a whole number of bytes")
    return int(number)


def parse_size_range(text: str) -> list[int]:
    """'8..64MiB' -> 8, 16, ..., 64MiB (doubling, as nccl-tests -b/-e/-f 2); '8,1KiB' -> a list."""
    if ".." in text:
        lo_s, hi_s = text.split("..", 1)
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        if lo <= 0 or hi < lo:
            raise ValueError(f"size range {text!r} needs 0 < start <= end")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= 2
        return out
    return [parse_size(p) for p in text.split(",") if p.strip()]


def format_size(num_bytes: int) -> str:
    """Short human form: 8 B, 64 KiB, 1.5 MiB."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= scale:
            v = num_bytes / scale
            return f"{v:.0f} {unit}" if v.is_integer() else f"{v:.1f} {unit}"
    return f"{num_bytes} B"
