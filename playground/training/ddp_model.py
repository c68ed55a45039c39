"""The same transformer in PyTorch, for the DDP baseline: imported only by its worker processes.

GPT-2's layout, as our numpy model's: the linear layers are GPT-2's Conv1D, weight (in, out) and
y = x W + b (torch's nn.Linear holds the transpose), the output layer is tied to the token
embedding, layernorm's eps is 1e-5, GELU is the tanh approximation, attention is causal with
scale 1/sqrt(head_dim). The modules are registered in our layout's order and under its names
(`h.0.attn.c_attn.weight`, ...), so `named_parameters()` is our layout, our flat buffer loads
into it name by name, and DDP, which buckets the parameters in reverse registration order, sees
them in the order our reducer does.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from playground.transformer import ModelConfig, ParamLayout


class Conv1D(nn.Module):
    def __init__(self, n_in: int, n_out: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dtype))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, dtype):
        super().__init__()
        self.heads, self.d = config.heads, config.d_model
        self.c_attn = Conv1D(config.d_model, 3 * config.d_model, dtype)
        self.c_proj = Conv1D(config.d_model, config.d_model, dtype)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)  # each head a run of head_dim, as ours
        q, k, v = (t.view(B, T, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig, dtype):
        super().__init__()
        self.c_fc = Conv1D(config.d_model, 4 * config.d_model, dtype)
        self.c_proj = Conv1D(4 * config.d_model, config.d_model, dtype)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, dtype):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, eps=1e-5, dtype=dtype)
        self.attn = Attention(config, dtype)
        self.ln_2 = nn.LayerNorm(config.d_model, eps=1e-5, dtype=dtype)
        self.mlp = MLP(config, dtype)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """tokens (B, T) -> logits (B, T, vocab)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        dtype = getattr(torch, config.dtype)
        self.wte = nn.Parameter(torch.empty(config.vocab_size, config.d_model, dtype=dtype))
        self.wpe = nn.Parameter(torch.empty(config.context, config.d_model, dtype=dtype))
        self.h = nn.ModuleList(Block(config, dtype) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d_model, eps=1e-5, dtype=dtype)

    def forward(self, tokens):
        x = F.embedding(tokens, self.wte) + self.wpe[: tokens.shape[1]]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.T


def build(config: ModelConfig, params: np.ndarray) -> GPT:
    """The torch model holding our flat buffer's values, parameter by parameter."""
    model = GPT(config)
    views = ParamLayout.for_config(config).views(params)
    names = [name for name, _ in model.named_parameters()]
    if names != list(views):
        raise AssertionError(f"torch's parameters {names[:4]}... are not our layout {list(views)[:4]}...")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(np.ascontiguousarray(views[name])))
    return model


def flat_params(model: GPT) -> np.ndarray:
    """The model's parameters as one flat numpy buffer in our layout."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
