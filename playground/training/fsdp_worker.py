"""One rank of the FSDP2 baseline: the same model, weights and batches, sharded with torch's
`fully_shard` (torch.distributed.fsdp, torch 2.13) over Gloo on CPU.

Started by `fsdp_baseline` with torchrun's env:// variables. The units are FSDP2's as torchtitan
wraps a transformer: `fully_shard` on every group of `unit_blocks` blocks (each its own unit), then
on the root (wte, wpe and ln_f: one unit of what is left); `unit_blocks: 0` wraps the root alone.
`reshard_after_forward` is passed to every unit (FSDP2 keeps the root's parameters whole between
forward and backward whatever it says). `prefetch` d >= 1 sets each unit's explicit forward and
backward prefetch to the d units after (before) it (`set_modules_to_forward_prefetch`,
`set_modules_to_backward_prefetch`); 0 leaves FSDP2's own (the next unit in backward, implicitly).

Per step it records the loss (the mean over its rows, as the DDP worker's), forward (the root's
forward and the loss), backward (`loss.backward()`, FSDP2's gathers and reduce-scatters inside it),
the optimizer (`Adam.step` and `zero_grad`, at our schedule's rate), and after the step the model
state this rank holds: its local shards of the parameters, their gradients and Adam's two states
(DTensor `to_local()`), and the process's peak RSS (the torch library's own included).

    python -m playground.training.fsdp_worker --spec JSON --out DIR
"""

import resource
import time
from pathlib import Path
from typing import Any

from playground.launcher.procs import exit_worker, rank_file, worker_main, write_record
from playground.training.torch_rank import adam, gloo_worker, model_and_batches
from playground.transformer import LRSchedule


def local_bytes(tensor) -> int:
    """The bytes this rank holds of `tensor` (a DTensor's local shard; a plain tensor whole)."""
    if tensor is None:
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return int(local.numel() * local.element_size())


def units_of(model, unit_blocks: int) -> list[list]:
    """The groups of blocks that are FSDP units, in forward order."""
    if unit_blocks == 0:
        return []
    blocks = list(model.h)
    return [blocks[i : i + unit_blocks] for i in range(0, len(blocks), unit_blocks)]


def shard(model, spec: dict) -> None:
    """`fully_shard` every unit and the root, with the spec's resharding and prefetch."""
    from torch.distributed.fsdp import fully_shard

    units: list[Any] = [fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=spec["reshard_after_forward"])
             for group in units_of(model, spec["unit_blocks"])]  # fmt: skip
    fully_shard(model, reshard_after_forward=spec["reshard_after_forward"])
    depth = spec["prefetch"]
    if depth >= 1:
        for i, unit in enumerate(units):
            if units[i + 1 : i + 1 + depth]:
                unit.set_modules_to_forward_prefetch(units[i + 1 : i + 1 + depth])
            if units[max(0, i - depth) : i]:
                unit.set_modules_to_backward_prefetch(units[max(0, i - depth) : i][::-1])


def state_bytes(model, optimizer) -> dict:
    """What this rank holds of the model state after a step."""
    params = list(model.parameters())
    states = [t for s in optimizer.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")]
    return {
        "params_bytes": sum(local_bytes(p) for p in params),
        "grads_bytes": sum(local_bytes(p.grad) for p in params),
        "optimizer_bytes": sum(local_bytes(t) for t in states),
    }


def _train(torch, dist, spec: dict, out_dir: Path) -> None:
    import torch.nn.functional as F

    from playground.training.ddp_model import build

    rank, world = dist.get_rank(), dist.get_world_size()
    config, params, sampler = model_and_batches(spec)
    start_rss = peak_rss_bytes()
    model = build(config, params)
    shard(model, spec)
    optimizer = adam(torch, model.parameters(), spec["lr"])
    schedule = LRSchedule(**spec["schedule"])
    with open(rank_file(out_dir, rank), "a") as f:
        for step in range(spec["steps"]):
            inputs, targets = (torch.from_numpy(a) for a in sampler.rank_batch(step, rank, world))
            t0 = time.perf_counter()
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = schedule.lr_at(step)
            optimizer.step()
            t_measure = time.perf_counter()
            memory = state_bytes(model, optimizer)  # the gradients' shards, before zero_grad frees them
            untimed = time.perf_counter() - t_measure
            optimizer.zero_grad()
            t3 = time.perf_counter() - untimed
            write_record(
                f,
                {
                    "rank": rank,
                    "step": step,
                    "loss": loss.item(),
                    "forward_s": t1 - t0,
                    "backward_s": t2 - t1,
                    "optimizer_s": t3 - t2,
                    "step_s": t3 - t0,
                    **memory,
                    "start_rss_bytes": start_rss,
                    "peak_rss_bytes": peak_rss_bytes(),
                },
            )


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


train = gloo_worker(_train)


def main(argv: list[str] | None = None) -> int:
    return worker_main(train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    exit_worker(main())
