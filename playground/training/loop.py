"""One mode's training on one rank: every step trained, checked and recorded.

After each step the ranks exchange their loss shares, parameter hashes and checksums
(`checks.exchange_and_verify`): a step that breaks an invariant stops the run there, naming the
step and the ranks. The records are what the report is made of (each rank returns its own; the
report reads the slowest rank's phases, as a step ends with its slowest rank).
"""

import socket
import time

from playground.training.checks import exchange_and_verify
from playground.training.memory import memory_record
from playground.training.step import DataParallel, TrainSetup
from playground.transformer import BatchSampler


def train_mode(
    comm, mode: str, setup: TrainSetup, sampler: BatchSampler, steps: int, on_step=None
) -> tuple[dict, DataParallel]:
    """(this rank's record of `steps` steps of `mode`, the trained DataParallel); `on_step(step)`
    runs after each step's check, on this thread (progress)."""
    dp = DataParallel(comm, mode, setup)
    records, digest = [], ""
    try:
        for step in range(steps):
            inputs, targets = sampler.rank_batch(step, comm.rank, comm.size)
            t = dp.train_step(step, inputs, targets)
            c0 = time.perf_counter()
            with comm.tracer.span("check", cat="phase", mode=mode, step=step):
                loss, digest = exchange_and_verify(comm, step, t.loss, dp.model.params, dp.reductions())
            check_s = time.perf_counter() - c0
            records.append(
                {
                    "step": step,
                    "loss": loss,
                    "forward_s": t.forward_s,
                    "backward_s": t.backward_s,
                    "comm_s": t.comm_s,
                    "optimizer_s": t.optimizer_s,
                    "step_s": t.step_s,
                    "allreduce_s": t.allreduce_s,
                    "check_s": check_s,
                    "backward_end": t.backward_end,
                }
            )
            comm.tracer.flush()
            if on_step is not None:
                on_step(step)
    finally:
        dp.close()
    model = dp.model
    record = {
        "mode": mode,
        "host": socket.gethostname(),
        "steps": records,
        "hash": digest,
        "buckets": [b.num_elements * model.params.itemsize for b in dp.buckets],
        "memory": memory_record(model.params.nbytes, model.grads.nbytes, dp.optimizer_state_bytes),
    }
    return record, dp
