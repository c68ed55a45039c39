"""One rank of the Gloo baseline: torch.distributed with the "gloo" backend on CPU tensors.

Started by `playground.baselines.gloo` with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (the
env:// rendezvous torchrun uses). Tensors wrap numpy arrays (torch.from_numpy shares memory), so
the shared timing loop and check in `measure` see the very buffers Gloo wrote. torch offers one
form of each collective: all_reduce, broadcast and reduce in place (the form PyTorch DDP's bucket
all-reduce uses), all-gather, reduce-scatter, all_to_all_single, gather, scatter and the send/recv
ring (batch_isend_irecv) out of place; the other form's columns stay empty.

    python -m playground.baselines.gloo_worker --spec JSON --out DIR
"""

import datetime
import os
import sys

import numpy as np

from playground.baselines import common
from playground.baselines.measure import Call, measure, parse_worker_args
from playground.core.errors import UsageError
from playground.launcher.procs import record_error

OUT_OF_PLACE = (
    "allgather",
    "reduce_scatter",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
)  # torch's one form


class GlooBackend:
    def __init__(self, timeout_s: float):
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # ranks share the cores; intra-op threads would only fight each other
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
        self.rank, self.nranks = dist.get_rank(), dist.get_world_size()
        self.ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        # newer torch renamed the tensor-in/tensor-out forms (the old names warn); older torch has only those
        self.all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def barrier(self) -> None:
        self.dist.barrier()

    def prepare(self, lay: common.Layout, op: str, inp: np.ndarray, inplace: bool) -> Call | None:
        """The call in the form torch.distributed offers, else None: all_reduce, broadcast and reduce
        work on one tensor (in place, restored before every call), the all-gather and
        reduce-scatter into a separate output tensor (out of place)."""
        dist, red, c = self.dist, self.ops[op], lay.collective
        src = self.torch.from_numpy(inp)
        out_np = np.empty(lay.out_count, dtype=inp.dtype)
        out = self.torch.from_numpy(out_np)
        if c in OUT_OF_PLACE:
            return None if inplace else self._out_of_place(c, lay, src, out, out_np, red)
        if not inplace:
            return None
        reset = lambda: out.copy_(src)  # noqa: E731
        if c == "allreduce":
            return Call(reset, lambda: dist.all_reduce(out, op=red), lambda: out_np)
        if c == "broadcast":
            return Call(reset, lambda: dist.broadcast(out, src=common.ROOT), lambda: out_np)
        if c == "reduce":
            root_out = (
                out_np if self.rank == common.ROOT else None
            )  # elsewhere the buffer holds nothing defined
            return Call(reset, lambda: dist.reduce(out, dst=common.ROOT, op=red), lambda: root_out)
        raise UsageError(f"unknown collective {c!r}")

    def _out_of_place(self, c: str, lay: common.Layout, src, out, out_np: np.ndarray, red) -> Call:
        dist, nothing, result = self.dist, lambda: None, lambda: out_np
        if c == "allgather":
            return Call(nothing, lambda: self.all_gather(out, src), result)
        if c == "reduce_scatter":
            return Call(nothing, lambda: self.reduce_scatter(out, src, op=red), result)
        if c == "alltoall":
            return Call(nothing, lambda: dist.all_to_all_single(out, src), result)
        at_root = self.rank == common.ROOT
        if c == "gather":  # into the root's blocks of one tensor (views of it)
            blocks = list(out.chunk(self.nranks)) if at_root else None
            run = lambda: dist.gather(src, gather_list=blocks, dst=common.ROOT)  # noqa: E731
            return Call(nothing, run, lambda: out_np if at_root else None)
        if c == "scatter":
            blocks = list(src.chunk(self.nranks)) if at_root else None
            return Call(nothing, lambda: dist.scatter(out, scatter_list=blocks, src=common.ROOT), result)
        if c == "sendrecv":
            right, left = (self.rank + 1) % self.nranks, (self.rank - 1) % self.nranks
            ops = [dist.P2POp(dist.isend, src, right), dist.P2POp(dist.irecv, out, left)]
            return Call(nothing, lambda: [req.wait() for req in dist.batch_isend_irecv(ops)], result)
        raise UsageError(f"unknown collective {c!r}")

    def close(self) -> None:
        self.dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    spec, out = parse_worker_args(__doc__, argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        backend = GlooBackend(spec["timeout_s"])
        measure(backend, spec, out)
        backend.close()
    except Exception as e:  # noqa: BLE001 - reported to the parent, which names the first failure
        record_error(out, rank, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
