"""One rank of the torch.distributed.pipelining baseline: the same model, weights, batches and
grid, trained with PyTorch's ScheduleGPipe or Schedule1F1B over Gloo on CPU.

Started by `torch_baseline` with the env:// variables torchrun sets. The rank's place in the grid is
ours (`GridShape`: stage r // data of replica r % data); its stage is our plan's blocks as torch
modules (`ddp_model`'s, registered under our names, so our flat buffer loads into them name by
name): the first stage embeds, the last ends in the output layer, a copy of wte tied to the
first stage's as Megatron-LM and torchtitan do it, by summing the two copies' gradients after
backward (one all-reduce over the pair). The schedule splits each replica's rows into m
micro-batches, the loss is the mean over a micro-batch's tokens and the schedule scales the
gradients by 1/m (`scale_grads`), the replicas average theirs (an all-reduce of each gradient over
the data group, divided by its size), then Adam as ours. Per step: the global batch's loss (last
stage) and the step's time, from the schedule's start to the optimizer's end.

    python -m playground.training.pipeline.torch_worker --spec JSON --out DIR
"""

import time
from pathlib import Path

from playground.comm.group import GridShape
from playground.launcher.procs import exit_worker, rank_file, worker_main, write_record
from playground.training.torch_rank import adam, average_over_replicas, gloo_group, model_and_batches
from playground.transformer import ModelConfig
from playground.transformer.plan import StagePlan, pipeline_plan


def stage_module(torch, config: ModelConfig, plan: StagePlan, params):
    """Our plan's part of the model as one torch module holding our initial values."""
    import torch.nn as nn
    import torch.nn.functional as F

    from playground.training.ddp_model import Block

    dtype = getattr(torch, config.dtype)

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            if plan.holds_wte:
                self.wte = nn.Parameter(torch.empty(config.vocab_size, config.d_model, dtype=dtype))
            if plan.embedding:
                self.wpe = nn.Parameter(torch.empty(config.context, config.d_model, dtype=dtype))
            self.h = nn.ModuleDict({str(layer): Block(config, dtype) for layer in plan.layers})
            if plan.head:
                self.ln_f = nn.LayerNorm(config.d_model, eps=1e-5, dtype=dtype)

        def forward(self, x):
            if plan.embedding:
                x = F.embedding(x, self.wte) + self.wpe[: x.shape[1]]
            for block in self.h.values():
                x = block(x)
            return self.ln_f(x) @ self.wte.T if plan.head else x

    module = Stage()
    whole = StagePlan.whole(config).layout(config).views(params)
    names = [name for name, _ in module.named_parameters()]
    if names != [s.name for s in plan.layout(config)]:
        raise AssertionError(f"torch's stage parameters {names[:4]}... are not our plan's")
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.from_numpy(whole[name].copy()))
    return module


def groups(dist, shape: GridShape) -> tuple[list, list, list]:
    """Every pipeline group (per replica), data group (per stage) and tied pair (per replica), made
    by every rank in the same order as torch requires."""
    pipes = [dist.new_group(shape.members(shape.rank_of(d, 0, 0), "pipeline")) for d in range(shape.data)]
    datas = [dist.new_group(shape.members(shape.rank_of(0, s, 0), "data")) for s in range(shape.pipeline)]
    tied = []
    if shape.pipeline > 1:
        tied = [
            dist.new_group([shape.rank_of(d, 0, 0), shape.rank_of(d, shape.pipeline - 1, 0)])
            for d in range(shape.data)
        ]
    return pipes, datas, tied


def train(spec: dict, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    with gloo_group(torch, dist, spec["timeout_s"]), open(rank_file(out_dir, dist.get_rank()), "a") as f:
        rank = dist.get_rank()
        shape = GridShape(spec["data"], spec["pipeline"])
        d, s, _ = shape.coords(rank)
        pipes, datas, tied = groups(dist, shape)
        config, params, sampler = model_and_batches(spec)
        plan = pipeline_plan(config, shape.pipeline)[s]
        for run, (name, m) in enumerate(spec["runs"]):
            module = stage_module(torch, config, plan, params)
            stage = PipelineStage(module, s, shape.pipeline, torch.device("cpu"), group=pipes[d])
            schedule = classes[name](stage, n_microbatches=m, loss_fn=loss_fn)
            optimizer = adam(torch, module.parameters(), spec["lr"])
            for step in range(spec["steps"]):
                inputs, targets = (torch.from_numpy(a) for a in sampler.rank_batch(step, d, shape.data))
                losses: list = []
                t0 = time.perf_counter()
                if plan.embedding and plan.head:
                    schedule.step(inputs, target=targets, losses=losses)
                elif plan.embedding:
                    schedule.step(inputs)
                elif plan.head:
                    schedule.step(target=targets, losses=losses)
                else:
                    schedule.step()
                if plan.tied_partner is not None:
                    dist.all_reduce(module.wte.grad, group=tied[d])
                average_over_replicas(dist, (p.grad for p in module.parameters()), datas[s], shape.data)
                optimizer.step()
                optimizer.zero_grad()
                t1 = time.perf_counter()
                loss = torch.stack(losses).mean() if losses else torch.zeros((), dtype=torch.float64)
                if plan.head:
                    average_over_replicas(dist, [loss], datas[s], shape.data)
                write_record(f, {"rank": rank, "run": run, "schedule": name, "m": m, "step": step,
                                 "loss": loss.item(), "step_s": t1 - t0})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return worker_main(train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    exit_worker(main())
