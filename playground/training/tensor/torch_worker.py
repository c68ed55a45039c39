"""One rank of the torch.distributed.tensor.parallel baseline: the same model, weights, batches and
data x tensor grid, trained with PyTorch's ColwiseParallel / RowwiseParallel (DTensor) over Gloo on
CPU.

Started by `torch_baseline` with the env:// variables torchrun sets. The grid is a 2-D DeviceMesh
("data", "tensor"), the tensor index fastest as ours (`GridShape`). torch's parallel styles shard
an nn.Linear (weight (out, in), torch's layout, the transpose of ours) along its output dimension
(ColwiseParallel: Shard(0)) or its input dimension (RowwiseParallel: Shard(1)), contiguously; so, as
torchtitan does, the attention's q, k and v are three Linear layers (our c_attn's three runs of
columns, loaded into them), and a contiguous shard of each is our shard's heads. The c_proj of the
attention and of the MLP are RowwiseParallel (an all-reduce after each, the bias added once), c_fc
ColwiseParallel; embeddings, layernorms and the tied head are plain replicated tensors, whose
gradients torch makes identical on every shard (ColwiseParallel all-reduces its input's gradient).
The replicas average their gradients over the data group (an all-reduce of each shard's local
gradient, divided by the replicas), then Adam as ours. Per step: the global batch's loss and the
step's time, from the forward's start to the optimizer's end.

    python -m playground.training.tensor.torch_worker --spec JSON --out DIR
"""

import time
from pathlib import Path

import numpy as np

from playground.comm.group import GridShape
from playground.launcher.procs import exit_worker, rank_file, worker_main, write_record
from playground.training.torch_rank import adam, average_over_replicas, gloo_group, model_and_batches
from playground.transformer import ModelConfig, ParamLayout

PLAN = {  # module -> torch's parallel style: Megatron's split, torchtitan's names
    "attn.q": "colwise",
    "attn.k": "colwise",
    "attn.v": "colwise",
    "attn.c_proj": "rowwise",
    "mlp.c_fc": "colwise",
    "mlp.c_proj": "rowwise",
}


def build(torch, config: ModelConfig, params: np.ndarray):
    """The model with nn.Linear layers holding our values (transposed), q, k, v apart."""
    import torch.nn as nn
    import torch.nn.functional as F

    dtype, d = getattr(torch, config.dtype), config.d_model

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(d, d, dtype=dtype) for _ in range(3))
            self.c_proj = nn.Linear(d, d, dtype=dtype)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (f(x).view(B, T, -1, config.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # this shard's heads
            return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(d, 4 * d, dtype=dtype), nn.Linear(4 * d, d, dtype=dtype)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = (nn.LayerNorm(d, eps=1e-5, dtype=dtype) for _ in range(2))
            self.attn, self.mlp = Attention(), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.empty(config.vocab_size, d, dtype=dtype))
            self.wpe = nn.Parameter(torch.empty(config.context, d, dtype=dtype))
            self.h = nn.ModuleList(Block() for _ in range(config.layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5, dtype=dtype)

        def forward(self, tokens):
            x = F.embedding(tokens, self.wte) + self.wpe[: tokens.shape[1]]
            for block in self.h:
                x = block(x)
            return self.ln_f(x) @ self.wte.T

    model = GPT()
    values = torch_values(config, params)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(np.ascontiguousarray(values[name])))
    return model


def torch_values(config: ModelConfig, params: np.ndarray) -> dict[str, np.ndarray]:
    """Our flat buffer as torch's parameters: c_attn's three runs of columns as q, k and v, and each
    block's matrices transposed (nn.Linear's (out, in))."""
    d, out = config.d_model, {}
    for name, view in ParamLayout.for_config(config).views(params).items():
        parts = [(name, view)]
        if ".c_attn." in name:
            parts = [
                (name.replace("c_attn", qkv), view[..., i * d : (i + 1) * d]) for i, qkv in enumerate("qkv")
            ]
        for part, value in parts:
            out[part] = value.T if part.startswith("h.") and value.ndim == 2 else value
    return out


def parallelize(model, tensor_mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for block in model.h:
        parallelize_module(block, tensor_mesh, {name: styles[style]() for name, style in PLAN.items()})


def local(grad):
    """A gradient's tensor on this rank (a DTensor's shard)."""
    return grad.to_local() if hasattr(grad, "to_local") else grad


def train(spec: dict, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    with gloo_group(torch, dist, spec["timeout_s"]), open(rank_file(out_dir, dist.get_rank()), "a") as f:
        rank, size = dist.get_rank(), dist.get_world_size()
        config, params, sampler = model_and_batches(spec)
        for run, t in enumerate(spec["tensor"]):
            shape = GridShape(size // t, 1, t)
            d_index, _, _ = shape.coords(rank)
            mesh = init_device_mesh("cpu", (shape.data, t), mesh_dim_names=("data", "tensor"))
            model = build(torch, config, params)
            parallelize(model, mesh["tensor"])
            optimizer = adam(torch, model.parameters(), spec["lr"])
            data_group = mesh["data"].get_group()
            for step in range(spec["steps"]):
                inputs, targets = (torch.from_numpy(a) for a in sampler.rank_batch(step, d_index, shape.data))
                t0 = time.perf_counter()
                logits = model(inputs)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
                loss.backward()
                average_over_replicas(
                    dist, (local(p.grad) for p in model.parameters()), data_group, shape.data
                )
                optimizer.step()
                optimizer.zero_grad()
                t1 = time.perf_counter()
                value = loss.detach().clone()
                average_over_replicas(dist, [value], data_group, shape.data)
                write_record(f, {"rank": rank, "run": run, "t": t, "step": step, "loss": value.item(),
                                 "step_s": t1 - t0})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return worker_main(train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    exit_worker(main())
