"""What every PyTorch baseline's rank does alike (`ddp_worker`, `pipeline.torch_worker`,
`tensor.torch_worker`): join Gloo as torchrun's env:// variables say, train our model from our
weights on our batches with our Adam, average over the data-parallel replicas, leave together.

torch is imported by the workers only (the caller hands `torch` and `dist` in), so this module
imports without it.
"""

import contextlib
import datetime
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from playground.transformer import AdamConfig, BatchSampler, ModelConfig, lecture_bytes
from playground.transformer.init import init_params


@contextlib.contextmanager
def gloo_group(torch: Any, dist: Any, timeout_s: float) -> Iterator[None]:
    """This rank in torch's process group over Gloo, with one intra-op thread (the ranks share the
    cores, as ours pin their BLAS to one thread); at the end a barrier, so no rank tears Gloo down
    while a peer's last message is still in flight, then the group destroyed."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    yield
    dist.barrier()
    dist.destroy_process_group()


def gloo_worker(body: Callable[[Any, Any, dict, Path], None]) -> Callable[[dict, Path], None]:
    """A worker's `train(spec, out_dir)` (`procs.worker_main`'s): torch imported, this rank in Gloo
    (`gloo_group`), then `body(torch, dist, spec, out_dir)`."""

    def train(spec: dict, out_dir: Path) -> None:
        import torch
        import torch.distributed as dist

        with gloo_group(torch, dist, spec["timeout_s"]):
            body(torch, dist, spec, out_dir)

    return train


def model_and_batches(spec: dict) -> tuple[ModelConfig, np.ndarray, BatchSampler]:
    """Our model's config, its initial flat parameters and the batch sampler, as our ranks have them."""
    config = ModelConfig.from_dict(spec["config"])
    sampler = BatchSampler(lecture_bytes(), config.context, spec["batch"], spec["seed"])
    return config, init_params(config, spec["seed"]), sampler


def adam(torch: Any, parameters: Iterable, lr: float) -> Any:
    """torch's Adam with our optimizer's betas and eps (`AdamConfig`'s) at learning rate `lr`."""
    ours = AdamConfig(lr=lr)
    return torch.optim.Adam(parameters, lr=ours.lr, betas=(ours.beta1, ours.beta2), eps=ours.eps)


def average_over_replicas(dist: Any, tensors: Iterable, group: Any, replicas: int) -> None:
    """Each tensor summed over the data group `group` and divided by the `replicas` in place (a
    gradient, a loss); nothing with one replica."""
    if replicas == 1:
        return
    for tensor in tensors:
        dist.all_reduce(tensor, group=group)
        tensor /= replicas
