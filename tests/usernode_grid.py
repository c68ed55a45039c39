"""A user-written node (not part of the package): checks every dtype x op x length in one launch."""

from dataclasses import dataclass

import numpy as np

from playground.collectives import ReduceOp, allreduce
from playground.collectives.check import expected_result, pattern


@dataclass(frozen=True)
class Params:
    algorithm: str = "ring"
    segment_bytes: int = 1 << 20
    big: int = 3001
    inplace: bool = False  # the result goes into the input array itself


def main(comm, params):
    n = comm.size
    rows, bad = [], []
    for dtype in ("float32", "float64", "int32", "int64"):
        for op in ("sum", "max", "min"):
            for count in sorted({0, 1, max(0, n - 1), n + 1, params.big}):
                x = pattern(comm.rank, count, dtype)
                before = x.copy()
                y = allreduce(
                    comm, x, ReduceOp.parse(op), params.algorithm, params.segment_bytes, params.inplace
                )
                want = expected_result(n, count, dtype, ReduceOp.parse(op))
                wrong = (
                    int(np.count_nonzero(y != want)) + int(y.dtype != want.dtype) + int(y.shape != want.shape)
                )
                if params.inplace:
                    wrong += int(y is not x)
                else:
                    wrong += int(not np.array_equal(x, before))  # the input must not be modified
                rows.append({"dtype": dtype, "op": op, "count": count, "wrong": wrong})
                if wrong:
                    bad.append(f"{dtype} {op} count {count}: {wrong} wrong")
    return {"ok": not bad, "rows": rows, "error": "; ".join(bad[:3])}
