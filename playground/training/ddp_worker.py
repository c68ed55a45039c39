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

import datetime
import time
from pathlib import Path

from playground.launcher.procs import exit_worker, rank_file, worker_main, write_record
from playground.tracing.timeline import covered
from playground.transformer import BatchSampler, LRSchedule, ModelConfig, lecture_bytes
from playground.transformer.init import init_params

MIB = 1 << 20


def _ddp(torch, model, spec: dict):
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module

    dist._DEFAULT_FIRST_BUCKET_BYTES = round((spec["first_bucket_mb"] or spec["bucket_cap_mb"]) * MIB)
    ddp_module._DEFAULT_BUCKET_CAP_MB = spec["bucket_cap_mb"]
    return torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)


def train(spec: dict, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from playground.training.ddp_model import build

    torch.set_num_threads(1)  # ranks share the cores, as ours pin their BLAS to one thread
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=spec["timeout_s"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    config = ModelConfig.from_dict(spec["config"])
    model = build(config, init_params(config, spec["seed"]))
    ddp = _ddp(torch, model, spec)
    spans: list[tuple[float, float]] = []
    bucket_bytes: dict[int, int] = {}

    def timed_allreduce(state, bucket):
        t0 = time.perf_counter()
        tensor = bucket.buffer()
        bucket_bytes[bucket.index()] = tensor.numel() * tensor.element_size()
        tensor.div_(world)

        def done(fut):
            spans.append((t0, time.perf_counter()))
            return fut.value()[0]

        return dist.all_reduce(tensor, async_op=True).get_future().then(done)

    ddp.register_comm_hook(None, timed_allreduce)
    last_grad = [0.0]

    def stamp(_param) -> None:
        last_grad[0] = max(last_grad[0], time.perf_counter())

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(stamp)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=spec["lr"], betas=(0.9, 0.95), eps=1e-8)
    sampler = BatchSampler(lecture_bytes(), config.context, spec["batch"], spec["seed"])
    schedule = LRSchedule(**spec["schedule"])
    with open(rank_file(out_dir, rank), "a") as f:
        for step in range(spec["steps"]):
            inputs, targets = (torch.from_numpy(a) for a in sampler.rank_batch(step, rank, world))
            spans.clear()
            last_grad[0] = 0.0
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
            end = last_grad[0] or t2
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
                    "allreduce_s": covered(spans),
                    "backward_span": [t1, end],
                    "allreduce_spans": sorted(spans),
                    "bucket_bytes": [bucket_bytes[i] for i in sorted(bucket_bytes)],
                },
            )
    dist.barrier()  # no rank tears Gloo down while a peer's last bucket is still in flight
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return worker_main(train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    exit_worker(main())
