"""One rank of the MPI baseline: mpi4py's buffer (upper-case) calls on numpy arrays.

Started by `mpiexec -n N python -m playground.baselines.mpi_worker --spec JSON --out DIR`; MPI
itself says who this rank is. The upper-case calls hand MPI the arrays' memory directly (no pickle),
out of place, so the shared timing loop in `measure` sees exactly what MPI wrote. A failing rank
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

    def prepare(self, lay: common.Layout, op: str, inp: np.ndarray) -> Call:
        comm, red = self.comm, self.ops[op]
        out = np.empty(lay.out_count, dtype=inp.dtype)
        nothing = lambda: None  # noqa: E731
        c = lay.collective
        if c == "allreduce":
            return Call(nothing, lambda: comm.Allreduce(inp, out, op=red), lambda: out)
        if c == "allgather":
            return Call(nothing, lambda: comm.Allgather(inp, out), lambda: out)
        if c == "reduce_scatter":
            return Call(nothing, lambda: comm.Reduce_scatter_block(inp, out, op=red), lambda: out)
        if c == "reduce":
            root_out = (
                out if self.rank == common.ROOT else None
            )  # MPI: recvbuf is significant only at the root
            return Call(nothing, lambda: comm.Reduce(inp, out, op=red, root=common.ROOT), lambda: root_out)
        if c == "broadcast":
            # in place: restore each rank's own input so a broadcast that did nothing is caught
            return Call(lambda: np.copyto(out, inp), lambda: comm.Bcast(out, root=common.ROOT), lambda: out)
        raise UsageError(f"unknown collective {c!r}")


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
