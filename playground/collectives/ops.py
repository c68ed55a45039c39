"""Reduction operators and the in-place numpy call that applies each."""

import enum

import numpy as np

from playground.core.errors import UsageError

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class ReduceOp(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"

    def __init__(self, value: str):
        self.ufunc: np.ufunc = _UFUNCS[value]  # an attribute, not a property: read once per call

    @classmethod
    def parse(cls, value: "ReduceOp | str") -> "ReduceOp":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise UsageError(
                f"unknown reduce op {value!r}; allowed: {', '.join(o.value for o in cls)}"
            ) from None
