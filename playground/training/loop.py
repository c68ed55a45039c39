"""One mode's training on one rank: every step trained, checked and recorded.

Between a step's gradient reduction and its update the ranks exchange their loss shares and
checksums (`checks.check_gradients`), after the update their parameter hashes
(`checks.check_params`): a step that breaks an invariant stops the run there, naming the step and
the ranks. The records are what the report is made of (each rank returns its own; the
report reads the slowest rank's phases, as a step ends with its slowest rank).
"""

import socket

from playground.training.checks import StepChecks
from playground.training.memory import memory_record
from playground.training.modes import Mode
from playground.training.step import DataParallel, TrainSetup
from playground.transformer import BatchSampler


def train_mode(
    comm, mode: Mode, setup: TrainSetup, sampler: BatchSampler, steps: int, on_step=None
) -> tuple[dict, DataParallel]:
    """(this rank's record of `steps` steps of `mode`, the trained DataParallel); `on_step(step)`
    runs after each step's check, on this thread (progress)."""
    dp = DataParallel(comm, mode, setup)
    records, digest = [], ""
    try:
        for step in range(steps):
            inputs, targets = sampler.rank_batch(step, comm.rank, comm.size)
            checks = StepChecks(comm, step, mode, dp.model.params.dtype)
            t = dp.train_step(step, inputs, targets, checks.gradients)
            digest = checks.params(dp.model.params)
            records.append(
                {
                    "step": step,
                    "loss": checks.loss,
                    "forward_s": t.forward_s,
                    "backward_s": t.backward_s,
                    "comm_s": t.comm_s,
                    "optimizer_s": t.optimizer_s,
                    "step_s": t.step_s,
                    "allreduce_s": t.allreduce_s,
                    "compute_cpu_s": t.compute_cpu_s,
                    "check_s": checks.seconds,
                    "step_start": t.step_start,
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
        "mode": mode.name,
        "host": socket.gethostname(),
        "steps": records,
        "hash": digest,
        "buckets": [b.num_bytes for b in dp.gradients.buckets],
        "memory": memory_record(model.params.nbytes, model.grads.nbytes, dp.gradients.state_bytes),
    }
    return record, dp
