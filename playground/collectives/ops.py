"""Reduction operators, the in-place numpy call that applies each, and avg's division at the end.

`avg` sums and then divides every element of the result by the rank count, once, where the result
lands (`average_into`): floats in their own type, so the quotient is rounded once; integers toward
zero, as C divides and NCCL's avg does for them. (NCCL premultiplies floating inputs by 1/N instead,
which nccl-tests checks within 2 units in the last place; summing first keeps our results exact
wherever the sum is, so the check stays exact.)
"""

import enum

import numpy as np

from playground.collectives import chunks
from playground.core.errors import UsageError

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum, "avg": np.add}


class ReduceOp(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AVG = "avg"

    def __init__(self, value: str):
        self.ufunc: np.ufunc = _UFUNCS[value]  # an attribute, not a property: read once per call
        self.averages = value == "avg"  # the result is divided by the rank count (`average_into`)

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


def average_into(buf: np.ndarray, num_ranks: int) -> None:
    """Divide the summed `buf` by `num_ranks` in place: floats in their own type, integers toward zero.
    A phantom buffer (data-free simulation) costs its pass over the bytes and changes nothing."""
    if num_ranks == 1 or buf.size == 0:
        return
    if chunks.is_phantom(buf):
        chunks.local_copy_cost(buf.size * buf.itemsize)
        return
    if buf.dtype.kind in "iu":
        rounds_up = (buf < 0) & (buf % num_ranks != 0)  # floor division, then back toward zero
        np.floor_divide(buf, num_ranks, out=buf)
        buf += rounds_up
    else:
        np.divide(buf, num_ranks, out=buf)
