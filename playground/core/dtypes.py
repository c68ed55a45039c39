"""The element types collectives move and reduce: numpy's, and the half-precision pair models train in.

float16 is numpy's own; bfloat16 comes from ml_dtypes (the library JAX and TensorFlow use), which
registers it with numpy, so arrays of it add, compare and divide like any other and
`np.dtype("bfloat16")` names it once `resolve` has met the name. ml_dtypes is imported then, not
before: its import costs about half a second of CPU, which every process (the CLI, each rank) would
otherwise pay at start. Its `dtype.str` is a bare '<V2' (numpy
has no letter for it), which would arrive as raw bytes: the wire carries its name instead
(`wire_name`). Integers and float32/64 reduce in C on the shared-memory path (native/reduce.c); the
half types reduce through numpy's ufuncs, in their own type, as nccl-tests' checks expect.
"""

from typing import TYPE_CHECKING, Literal

import numpy as np

from playground.core.errors import UsageError

DTYPES = ("float32", "float64", "int32", "int64", "float16", "bfloat16")  # what bench and simulate offer
HALF = ("float16", "bfloat16")

# `DTYPES` as a parameter type (a node's `Params` reads the Literal at run time); a string to the
# type checker, which cannot evaluate a Literal built from a tuple.
if TYPE_CHECKING:
    DtypeName = str
else:
    DtypeName = Literal[DTYPES]


def resolve(dtype) -> np.dtype:
    """np.dtype(dtype), where the name "bfloat16" works too (ml_dtypes registers it on first use)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

    return np.dtype(dtype)


def parse(name: str) -> np.dtype:
    """The numpy dtype of one of `DTYPES`; UsageError naming the allowed ones otherwise."""
    if name not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}", field="dtype")
    return resolve(name)


def wire_name(dtype: np.dtype) -> bytes:
    """What a message header carries for `dtype` (at most 8 bytes): its `str` where that names it
    ('<f4'), its name where it does not (bfloat16's '<V2' would come back as raw bytes)."""
    text = dtype.str
    if np.dtype(text) != dtype:
        text = dtype.name
    if len(text) > 8:
        raise UsageError(f"dtype {dtype} has no name of at most 8 bytes to travel by", field="dtype")
    return text.encode()
