"""Reduction operators and the in-place numpy call that applies each."""

import enum

import numpy as np

from playground.errors import UsageError


class ReduceOp(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"

    @property
    def ufunc(self) -> np.ufunc:
        return _UFUNCS[self._value_]  # keyed by the value: an Enum member hashes in Python

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


_UFUNCS = {
    ReduceOp.SUM.value: np.add,
    ReduceOp.PROD.value: np.multiply,
    ReduceOp.MAX.value: np.maximum,
    ReduceOp.MIN.value: np.minimum,
}
