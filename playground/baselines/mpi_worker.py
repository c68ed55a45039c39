"""One rank of the MPI baseline: mpi4py's buffer (upper-case) calls on numpy arrays.

Started by `mpiexec -n N python -m playground.baselines.mpi_worker --spec JSON --out DIR`; MPI
itself says who this rank is. The upper-case calls hand MPI the arrays' memory directly (no pickle),
so the shared timing loop in `measure` sees exactly what MPI wrote; each collective runs out of
place and in place (MPI_IN_PLACE; for send/recv, MPI_Sendrecv_replace), as nccl-tests reports both. A failing rank
calls Abort so the others do not sit in a collective until the parent's deadline.
"""

import sys

import numpy as np

from playground.baselines import common
from playground.baselines.measure import Call, measure, parse_worker_args
from playground.core.errors import UsageError
from playground.launcher.procs import record_error


class MPIBackend:
    def __init__(self):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.nranks = self.comm.Get_rank(), self.comm.Get_size()
        self.ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def barrier(self) -> None:
        self.comm.Barrier()

    def prepare(self, lay: common.Layout, op: str, inp: np.ndarray, inplace: bool) -> Call | None:
        """The call in the form asked for: out of place (`inp` -> a separate output), or in place
        (MPI_IN_PLACE: the input is the receive buffer, restored before every call). MPI_Bcast has
        one buffer only: it is in place, with no out-of-place form."""
        comm, red, c = self.comm, self.ops[op], lay.collective
        out = np.empty(lay.out_count, dtype=inp.dtype)
        nothing = lambda: None  # noqa: E731
        at_root = self.rank == common.ROOT  # reduce: recvbuf is significant only at the root
        if not inplace:
            if c == "allreduce":
                return Call(nothing, lambda: comm.Allreduce(inp, out, op=red), lambda: out)
            if c == "allgather":
                return Call(nothing, lambda: comm.Allgather(inp, out), lambda: out)
            if c == "reduce_scatter":
                return Call(nothing, lambda: comm.Reduce_scatter_block(inp, out, op=red), lambda: out)
            if c == "reduce":
                run = lambda: comm.Reduce(inp, out, op=red, root=common.ROOT)  # noqa: E731
                return Call(nothing, run, lambda: out if at_root else None)
            if c == "broadcast":
                return None
            return self._moves(c, inp, out, at_root)
        buf, ip = np.empty(max(lay.in_count, lay.out_count), dtype=inp.dtype), self.MPI.IN_PLACE
        if c == "allgather":  # this rank's part in its place, the others not yet right
            mine = slice(self.rank * lay.in_count, (self.rank + 1) * lay.in_count)
            return Call(lambda: _fill(buf, mine, inp), lambda: comm.Allgather(ip, buf), lambda: buf)
        reset = lambda: np.copyto(buf, inp)  # noqa: E731
        if c == "allreduce":
            return Call(reset, lambda: comm.Allreduce(ip, buf, op=red), lambda: buf)
        if c == "reduce_scatter":  # the result is the first out_count elements of the input buffer
            run = lambda: comm.Reduce_scatter_block(ip, buf, op=red)  # noqa: E731
            return Call(reset, run, lambda: buf[: lay.out_count])
        if c == "reduce":  # MPI_IN_PLACE at the root only; the others send their buffer
            if at_root:
                run = lambda: comm.Reduce(ip, buf, op=red, root=common.ROOT)  # noqa: E731
                return Call(reset, run, lambda: buf)
            return Call(reset, lambda: comm.Reduce(buf, None, op=red, root=common.ROOT), nothing)
        if c == "broadcast":  # restore each rank's own input, so a broadcast that did nothing is caught
            return Call(reset, lambda: comm.Bcast(buf, root=common.ROOT), lambda: buf)
        return self._moves_in_place(c, lay, inp, buf, reset, at_root)

    def _moves(self, c: str, inp: np.ndarray, out: np.ndarray, at_root: bool) -> Call:
        """Out of place: all-to-all, gather, scatter, the send/recv ring."""
        comm, nothing, root = self.comm, lambda: None, common.ROOT
        if c == "alltoall":
            return Call(nothing, lambda: comm.Alltoall(inp, out), lambda: out)
        if c == "gather":
            run = lambda: comm.Gather(inp, out if at_root else None, root=root)  # noqa: E731
            return Call(nothing, run, lambda: out if at_root else None)
        if c == "scatter":
            return Call(nothing, lambda: comm.Scatter(inp if at_root else None, out, root=root), lambda: out)
        if c == "sendrecv":
            right, left = (self.rank + 1) % self.nranks, (self.rank - 1) % self.nranks
            return Call(nothing, lambda: comm.Sendrecv(inp, right, recvbuf=out, source=left), lambda: out)
        raise UsageError(f"unknown collective {c!r}")

    def _moves_in_place(self, c, lay, inp, buf: np.ndarray, reset, at_root: bool) -> Call:
        """In place (MPI_IN_PLACE at the root of gather and scatter; Sendrecv_replace)."""
        comm, ip, root, n = self.comm, self.MPI.IN_PLACE, common.ROOT, self.nranks
        if c == "alltoall":
            return Call(reset, lambda: comm.Alltoall(ip, buf), lambda: buf)
        if c == "sendrecv":
            right, left = (self.rank + 1) % n, (self.rank - 1) % n
            return Call(reset, lambda: comm.Sendrecv_replace(buf, right, source=left), lambda: buf)
        block = lay.in_count if c == "gather" else lay.out_count
        mine = buf[self.rank * block : (self.rank + 1) * block]
        if c == "gather":  # the whole output on every rank, this rank's block in its place
            fill = lambda: _fill(buf, slice(self.rank * block, (self.rank + 1) * block), inp)  # noqa: E731
            if at_root:
                return Call(fill, lambda: comm.Gather(ip, buf, root=root), lambda: buf)
            return Call(fill, lambda: comm.Gather(mine, None, root=root), lambda: None)
        if c == "scatter":  # the root's block stays where it is; the others land in theirs
            if at_root:
                return Call(reset, lambda: comm.Scatter(buf, ip, root=root), lambda: mine)
            return Call(reset, lambda: comm.Scatter(None, mine, root=root), lambda: mine)
        raise UsageError(f"unknown collective {c!r}")


def _fill(buf: np.ndarray, mine: slice, inp: np.ndarray) -> None:
    buf.fill(common.SENTINEL)  # no element of any rank's pattern: a part never gathered is counted wrong
    buf[mine] = inp


def main(argv: list[str] | None = None) -> int:
    spec, out = parse_worker_args(__doc__, argv)
    backend = None
    try:
        backend = MPIBackend()
        measure(backend, spec, out)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which names the first failure
        rank = backend.rank if backend else 0
        record_error(out, rank, e)
        if backend is not None:
            backend.comm.Abort(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
