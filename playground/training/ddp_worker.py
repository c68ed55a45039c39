"""One rank of the PyTorch DDP baseline: the same model, weights and batches, trained with
`torch.nn.parallel.DistributedDataParallel` over Gloo on CPU.

Started by `ddp_baseline` with the env:// variables torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT). Per step it records the loss (the mean over its rows, as a DDP user computes it)
and the phases, timed as ours are:
- forward: DDP's forward (its pre-forward bucket work included) and the loss;
- backward compute: from the start of backward to the last parameter's gradient accumulated (a
  post-accumulate-grad hook on every parameter stamps the time);
- exposed communication: from there until `loss.backward()` returns, which DDP makes wait for every
  bucket's all-reduce (its `finalize_backward`);
- optimizer: `Adam.step()` and `zero_grad()`, at the step's learning rate from our schedule
  (`LRSchedule`, written into the optimizer's param group before the step, as a torch
  LR scheduler does).
The all-reduces are timed by a communication hook that is torch's own default
(`ddp_comm_hooks.default_hooks.allreduce_hook`: divide by the world size, all-reduce, take the
result) with a time stamp at launch and one when its future completes.

Buckets: DDP's defaults are 25 MiB with a first bucket of 1 MiB, taken only when `bucket_cap_mb`
is left unset; to run it with another cap and first bucket the worker sets the two module
defaults DDP reads at construction and leaves `bucket_cap_mb` unset, so DDP's own logic applies
them. `gradient_as_bucket_view=True`: the gradients are views of the buckets, as ours are slices
of one buffer.

    python -m playground.training.ddp_worker --spec JSON --out DIR
"""

import time
from pathlib import Path

from playground.launcher.procs import exit_worker, rank_file, worker_main, write_record
from playground.tracing.timeline import covered
from playground.training.torch_rank import adam, gloo_worker, model_and_batches
from playground.transformer import LRSchedule

MIB = 1 << 20


def _ddp(torch, model, spec: dict):
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module

    dist._DEFAULT_FIRST_BUCKET_BYTES = round((spec["first_bucket_mb"] or spec["bucket_cap_mb"]) * MIB)
    ddp_module._DEFAULT_BUCKET_CAP_MB = spec["bucket_cap_mb"]
    return torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)


class _Stamps:
    """What the hooks see of one step: each all-reduce's (launch, completion) span, each bucket's
    bytes, and when the last gradient was accumulated."""

    def __init__(self, dist, ddp, model, world: int):
        self.dist, self.world = dist, world
        self.spans: list[tuple[float, float]] = []
        self.bucket_bytes: dict[int, int] = {}
        self.last_grad = 0.0
        ddp.register_comm_hook(None, self.timed_allreduce)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.stamp)

    def timed_allreduce(self, state, bucket):
        """torch's default hook (divide by the world size, all-reduce, take the result), timed."""
        t0 = time.perf_counter()
        tensor = bucket.buffer()
        self.bucket_bytes[bucket.index()] = tensor.numel() * tensor.element_size()
        tensor.div_(self.world)

        def done(fut):
            self.spans.append((t0, time.perf_counter()))
            return fut.value()[0]

        return self.dist.all_reduce(tensor, async_op=True).get_future().then(done)

    def stamp(self, _param) -> None:
        self.last_grad = max(self.last_grad, time.perf_counter())

    def clear(self) -> None:
        self.spans.clear()
        self.last_grad = 0.0


def _train(torch, dist, spec: dict, out_dir: Path) -> None:
    import torch.nn.functional as F

    from playground.training.ddp_model import build

    rank, world = dist.get_rank(), dist.get_world_size()
    config, params, sampler = model_and_batches(spec)
    model = build(config, params)
    ddp = _ddp(torch, model, spec)
    stamps = _Stamps(dist, ddp, model, world)
    optimizer = adam(torch, ddp.parameters(), spec["lr"])
    schedule = LRSchedule(**spec["schedule"])
    with open(rank_file(out_dir, rank), "a") as f:
        for step in range(spec["steps"]):
            inputs, targets = (torch.from_numpy(a) for a in sampler.rank_batch(step, rank, world))
            stamps.clear()
            t0 = time.perf_counter()
            logits = ddp(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = schedule.lr_at(step)
            optimizer.step()
            optimizer.zero_grad()
            t3 = time.perf_counter()
            end = stamps.last_grad or t2
            write_record(
                f,
                {
                    "rank": rank,
                    "step": step,
                    "loss": loss.item(),
                    "forward_s": t1 - t0,
                    "backward_s": end - t1,
                    "comm_s": t2 - end,
                    "optimizer_s": t3 - t2,
                    "step_s": t3 - t0,
                    "allreduce_s": covered(stamps.spans),
                    "backward_span": [t1, end],
                    "allreduce_spans": sorted(stamps.spans),
                    "bucket_bytes": [stamps.bucket_bytes[i] for i in sorted(stamps.bucket_bytes)],
                },
            )


train = gloo_worker(_train)


def main(argv: list[str] | None = None) -> int:
    return worker_main(train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    exit_worker(main())
