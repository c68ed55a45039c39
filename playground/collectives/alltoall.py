"""The all-to-all dispatchers: `alltoall` (equal blocks: pairwise, Bruck, scattered, or auto) and
`alltoallv` (a count per peer, zeros allowed: pairwise or scattered).

Rank r's output is, in rank order, the block every rank addressed to r: what a mixture-of-experts
layer does twice a step (tokens to their experts, results back). Both are collective over `comm`, a
world or a process group (comm/group.py), and check their input before any message leaves: a bad
count is a `UsageError` naming `send_counts` or `recv_counts`, on the rank that passed it. Counts
that two ranks disagree on (rank a sends b 5 elements, b expects 4) are a `MessageMismatch` on the
receiver naming both ranks.
"""

from collections.abc import Sequence

import numpy as np

from playground.collectives import registry
from playground.collectives.auto import choose_alltoall
from playground.collectives.chunks import (
    copy_into,
    empty,
    flat,
    flat_copy,
    packed_bounds,
    segment_elems_for,
    work_buffer,
)
from playground.collectives.scattered import scattered_into
from playground.core.errors import UsageError

TAG_COUNTS = -63  # alltoallv without recv_counts: the counts go round first
_ALLTOALL = {a.name: a for a in registry.REGISTRY if a.collective == "alltoall"}  # one lookup a call


def alltoall(
    comm,
    x: np.ndarray,
    algorithm: str = "auto",
    segment_bytes: int | None = None,
    inplace: bool = False,
) -> np.ndarray:
    """Rank r gets block r of every rank's flat `x` (cut into N equal blocks), in rank order: a new
    array of `x`'s shape; with `inplace`, written over `x` (writable, C-contiguous), which is returned.
    `algorithm`: pairwise, bruck, scattered, or auto: the calibrated model's pick for this size, where
    the communicator was given the model's table (`comm.alltoall_picks`: sim/calibrated.py), else
    MPICH's rule by block size and rank count."""
    size = comm.size
    source = work_buffer(x, True) if inplace else flat(x)
    if source.size % size:
        raise UsageError(
            f"alltoall: {source.size} elements do not cut into {size} equal blocks (alltoallv takes "
            "uneven ones)",
            field="x",
        )
    block = source.size // size
    if algorithm == registry.AUTO:
        algorithm = choose_alltoall(source.nbytes, size, getattr(comm, "alltoall_picks", None))
    algo = _ALLTOALL.get(algorithm) or registry.get("alltoall", algorithm)  # (raises: allowed names)
    out = source if inplace else empty(source.size, like=source)
    if inplace:
        source = flat_copy(source)  # the input as it was: every block leaves from here
    seg = segment_elems_for(segment_bytes or comm.segment_bytes, source.itemsize)
    if size == 1 or block == 0:  # nothing to send: every rank knows it, as every rank has x's length
        copy_into(out, source)
    else:
        comm.begin_collective("alltoall", algorithm, source)  # not a `with`: a small all-to-all's path
        try:
            algo.run(comm, source, out, block, seg)
        except BaseException:
            comm.end_collective(False)
            raise
        comm.end_collective()
    return x if inplace else out.reshape(np.shape(x))


def alltoallv(
    comm,
    x: np.ndarray,
    send_counts: Sequence[int],
    recv_counts: Sequence[int] | None = None,
    algorithm: str = "scattered",
    segment_bytes: int | None = None,
) -> np.ndarray:
    """`x` (flat) cut into blocks of `send_counts[d]` elements, block d to rank d; rank r gets, in rank
    order, the blocks addressed to it, packed end to end (torch's all_to_all_single with split sizes).
    `recv_counts[s]`: what rank s sends here; None: learnt from the senders first (one all-to-all of
    the counts). `algorithm`: pairwise or scattered."""
    size = comm.size
    source = flat(x)
    send = _counts(send_counts, size, "send_counts")
    if sum(send) != source.size:
        raise UsageError(
            f"alltoallv: send_counts add up to {sum(send)} elements, but x has {source.size}",
            field="send_counts",
        )
    algo = registry.get("alltoallv", algorithm)
    with comm.collective("alltoallv", algo.name):
        recv = _counts(recv_counts, size, "recv_counts") if recv_counts is not None else _learn(comm, send)
        if recv[comm.rank] != send[comm.rank]:
            raise UsageError(
                f"alltoallv: rank {comm.rank}'s own block: {recv[comm.rank]} elements received, "
                f"{send[comm.rank]} sent",
                field="recv_counts",
            )
        out = empty(sum(recv), like=source)
        seg = segment_elems_for(segment_bytes or comm.segment_bytes, source.itemsize)
        algo.run(comm, source, packed_bounds(send), out, packed_bounds(recv), seg)
    return out


def _counts(counts: Sequence[int], size: int, field: str) -> list[int]:
    """`counts` as N non-negative ints; UsageError naming `field` otherwise."""
    out = [int(c) for c in counts]
    if len(out) != size:
        raise UsageError(f"alltoallv: {field} has {len(out)} entries, one per rank needs {size}", field=field)
    if any(c < 0 for c in out) or any(int(c) != c for c in counts):
        raise UsageError(f"alltoallv: {field} must be whole numbers >= 0, got {list(counts)}", field=field)
    return out


def _learn(comm, send: list[int]) -> list[int]:
    """What every rank sends this one: the send counts' own all-to-all (one int64 per peer, all posted
    at once, on a tag of their own)."""
    counts = np.asarray(send, dtype=np.int64)
    out = np.empty(comm.size, dtype=np.int64)
    bounds = packed_bounds([1] * comm.size)
    scattered_into(comm, counts, bounds, out, bounds, 1, TAG_COUNTS)
    return [int(c) for c in out]


def check_counts(counts: Sequence[Sequence[int]], size: int, totals: Sequence[int]) -> None:
    """A whole alltoallv layout (row r: what rank r sends each rank) for `size` ranks, every row adding
    up to each of `totals` (elements a rank puts in); UsageError saying what does not fit."""
    if len(counts) != size:
        raise UsageError(f"{len(counts)} rows, one per rank needs {size}", field="counts")
    for r, row in enumerate(counts):
        if len(row) != size or any(c < 0 for c in row):
            raise UsageError(f"row {r} must be {size} counts >= 0, got {list(row)}", field="counts")
        for total in totals:
            if sum(row) != total:
                raise UsageError(
                    f"row {r} adds up to {sum(row)} elements, but each rank puts in {total}", field="counts"
                )
