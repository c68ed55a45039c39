"""A GPT-2 shaped decoder-only transformer over flat parameter and gradient buffers.

    x = wte[tokens] + wpe[positions]
    per block:  x = x + attn.c_proj(attend(split_heads(attn.c_attn(ln_1(x)))))
                x = x + mlp.c_proj(gelu(mlp.c_fc(ln_2(x))))
    logits = ln_f(x) @ wte.T                                   (the output layer is tied to wte)

Training: `forward(tokens, targets)` keeps the activations and returns the loss, `backward()`
writes every gradient into `grads` and hands each one over through `on_grad_ready(index)` the
moment it is final, in reverse layout order: ln_f.bias first, then the blocks from the last to
the first, then wpe, and wte last of all, because the tied embedding gets its gradient twice
(from the output layer at the start of backward and from the token embedding at the very end).
A callback may read or all-reduce its parameter's slice of `grads` at once, on another thread:
backward never touches that slice again.

Pipeline stages: a model built with a `plan.StagePlan` holds only that stage's parameters and
runs its blocks: `forward_stage(inputs, targets)` takes the tokens (first stage) or the previous
stage's activation, and returns the loss (last stage) or its output activation, with the
`Activations` its backward needs; `backward_stage(saved, dy)` takes that and the output's gradient
(none on the last stage) and returns the input's gradient (none on the first). Several micro-batches
may be in flight: each forward's `Activations` is its own. `forward`/`backward` are the same two
on the whole model's plan, one forward at a time.

Tensor parallelism: a plan whose `tensor` splits the matrices (`tensor_plan`: Megatron-LM's
column- then row-parallel pairs) runs each block on this rank's heads and MLP units; `all_reduce`
(the tensor group's sum, in place, told which product it completes) completes the two row-parallel
products forward and the input gradients of the two column-parallel ones backward. Without a split it is the identity, and the
model runs exactly the operations it always did.

Mixture of experts: a plan with `experts` (`moe.ExpertPlan`) runs each block's MLP as a router and E
experts (`moe.MoELayer`: router, permute, all-to-all, experts, all-to-all, un-permute), the experts
spread over an expert group whose all-to-all is `exchange`; the loss adds the balancing loss. The
experts' parameters lead the layout and are handed over after wte, when every block's are final.

Decoding: `step(tokens, positions, attend)` runs the same blocks over packed tokens (several
sequences, any number of new tokens each) with attention left to the caller: `attend(layer, q,
k, v)` gets the queries, keys and values (num_tokens, heads, head_dim) of this step's tokens,
stores k and v in its cache and returns each token's attention output over its own sequence
(`generate.DenseKVCache` is the contiguous reference; a paged cache reads through block tables).
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from playground.core.errors import UsageError
from playground.transformer.activations import Activations, BlockSaved, CausalAttention
from playground.transformer.config import ModelConfig
from playground.transformer.kernels import Kernels, get_kernels
from playground.transformer.layers import flat_rows
from playground.transformer.layout import BLOCK_PARAMS
from playground.transformer.moe import Exchange, MoELayer, is_expert
from playground.transformer.plan import StagePlan

Attend = Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
GradReady = Callable[[int], None]
AllReduce = Callable[[np.ndarray, str], np.ndarray]  # the tensor group's sum of a fresh array, in place
Span = Callable[[str], AbstractContextManager]


def no_span(name: str) -> AbstractContextManager:
    return nullcontext()


class Transformer:
    """`params` and `grads` are flat buffers (`config.dtype`, `layout.num_elements`); `p` and `g`
    map each parameter's name to its view in them. Pass your own buffers (shared memory, a ZeRO
    all-gather target) to have the model use them in place; otherwise `params` is GPT-2's
    initialisation from `seed` and `grads` zeros. `plan` (default: the whole model) says which
    blocks and ends this model holds and runs (`plan.StagePlan`); its initial parameters are the
    whole model's from `seed`, picked by name (and cut to this rank's shards), so the stages of a
    pipeline and the shards of a tensor-parallel layer start as one process. A plan that splits
    matrices needs `all_reduce`: its tensor group's sum (see the module doc). A plan with experts
    spread over several ranks needs `exchange`, its expert group's all-to-all; `permute` says how the
    tokens reach their experts (moe/permute.py: sorted or gathered). `kernels`: the code that
    computes each piece (kernels.py: native, the default, or numpy's reference)."""

    def __init__(
        self,
        config: ModelConfig,
        params: np.ndarray | None = None,
        *,
        seed: int = 0,
        grads: np.ndarray | None = None,
        plan: StagePlan | None = None,
        all_reduce: AllReduce | None = None,
        kernels: str | Kernels | None = None,
        exchange: Exchange | None = None,
        permute: str = "sorted",
    ):
        self.config = config
        self.kernels = get_kernels(kernels)
        self.plan = plan or StagePlan.whole(config)
        if self.plan.stop_layer > config.layers:
            raise UsageError(
                f"blocks up to {self.plan.stop_layer}, the model has {config.layers}", field="plan"
            )
        if self.plan.tensor.is_split and all_reduce is None:
            raise UsageError(
                f"{self.plan.describe()} needs its tensor group's all_reduce", field="all_reduce"
            )
        self.all_reduce = all_reduce or unsplit
        self.heads = self.plan.tensor.heads(config)  # the attention heads this rank computes
        self.moe = MoELayer(self.plan.experts, exchange, permute) if self.plan.experts else None
        self.layout = self.plan.layout(config)
        if params is None:
            params = self.plan.initial_params(config, seed)
        else:
            params = self._checked(params, "params")
        self.params = params
        self.grads = np.zeros_like(self.params) if grads is None else self._checked(grads, "grads")
        self.p = self.layout.views(self.params)
        self.g = self.layout.views(self.grads)
        self._saved: Activations | None = None

    def _checked(self, buf: np.ndarray, name: str) -> np.ndarray:
        n, dtype = self.layout.num_elements, self.config.np_dtype
        if buf.shape != (n,) or buf.dtype != dtype or not buf.flags.c_contiguous or not buf.flags.writeable:
            raise UsageError(
                f"must be a writable contiguous {dtype} array of shape ({n},), got {buf.dtype} {buf.shape}",
                field=name,
            )
        return buf

    # ---- training -------------------------------------------------------------------------------

    def forward(
        self,
        tokens: np.ndarray,
        targets: np.ndarray,
        *,
        loss_denominator: int | None = None,
        span: Span = no_span,
    ) -> float:
        """The cross-entropy of predicting `targets` (B, T) from `tokens` (B, T), summed over the
        tokens and divided by `loss_denominator` (default: this batch's B*T). A rank that computes
        its 1/N of a global batch passes the global batch's token count: its loss and gradients
        are then its share, and their SUM over ranks is exactly the global mean."""
        self._whole("forward")
        loss, self._saved = self.forward_stage(tokens, targets, loss_denominator=loss_denominator, span=span)
        if not isinstance(loss, float):  # the whole model ends in its head: a loss, not an activation
            raise UsageError(f"forward: the model's last stage returned an activation {np.shape(loss)}")
        return loss

    def backward(self, on_grad_ready: GradReady | None = None, *, span: Span = no_span) -> None:
        """Every parameter's gradient of the last `forward`'s loss, written (not added) into
        `grads`, each announced by `on_grad_ready(layout index)` once final (see the module doc)."""
        if self._saved is None:
            raise UsageError("backward() needs a forward() first (one backward per forward)")
        saved, self._saved = self._saved, None
        self.backward_stage(saved, None, on_grad_ready, span=span)

    def forward_stage(
        self,
        inputs: np.ndarray,
        targets: np.ndarray | None = None,
        *,
        loss_denominator: int | None = None,
        span: Span = no_span,
    ) -> tuple[float | np.ndarray, Activations]:
        """This stage's forward: `inputs` are the tokens (B, T) on the first stage, else the previous
        stage's output (B, T, d); returns (the loss, as `forward`'s, on the last stage, else the
        output activation (B, T, d)) and what `backward_stage` needs of this forward."""
        plan = self.plan
        if plan.embedding:
            tokens, _ = self._check_batch(inputs, inputs)
            with span("forward.embedding"):
                x = self.p["wte"][tokens] + self.p["wpe"][np.arange(tokens.shape[1])]
        else:
            tokens, x = None, self._check_activation(inputs)
        if plan.head:
            targets = None if targets is None else np.asarray(targets)
            if targets is None or targets.shape != x.shape[:2]:
                raise UsageError(
                    f"tokens and targets must both be (batch, T) = {x.shape[:2]}, got "
                    f"{None if targets is None else targets.shape}",
                    field="targets",
                )
        attention, blocks = CausalAttention(kernels=self.kernels), []
        for layer in plan.layers:
            with span(f"forward.h.{layer}"):
                x, saved = self._block_forward(layer, x, attention)
            blocks.append(saved)
        if loss_denominator is not None:
            denominator = loss_denominator
        else:
            denominator = targets.size if targets is not None else 0
        if not plan.head:
            return x, Activations(tokens, None, denominator, attention, blocks, None)
        with span("forward.head"):
            k = self.kernels
            xf, ln_f = k.layernorm_forward(x, self.p["ln_f.weight"], self.p["ln_f.bias"])
            loss, probs = k.cross_entropy_forward(k.matmul(xf, self.p["wte"].T), targets, denominator)
        if self.moe is not None:
            loss += self.moe.aux_loss([b.experts for b in blocks], denominator)
        return loss, Activations(tokens, targets, denominator, attention, blocks, (xf, ln_f, probs))

    def backward_stage(
        self,
        saved: Activations,
        dy: np.ndarray | None = None,
        on_grad_ready: GradReady | None = None,
        *,
        span: Span = no_span,
    ) -> np.ndarray | None:
        """This stage's backward of the forward that returned `saved`: `dy` is the gradient of its
        output (None on the last stage: the loss's); writes (not adds) every gradient of this
        stage into `grads`, announcing each once final, in reverse layout order; returns the
        gradient of its input activation (None on the first stage)."""
        plan, ready, k = self.plan, on_grad_ready or (lambda index: None), self.kernels
        p, g, index = self.p, self.g, self.layout
        if plan.head:
            if saved.head is None:
                raise UsageError("backward_stage: the forward it follows kept no head (another stage's?)")
            xf, ln_f, probs = saved.head
            with span("backward.head"):
                dlogits = k.cross_entropy_backward(probs, saved.targets, saved.denominator)
                k.matmul(flat_rows(dlogits).T, flat_rows(xf), out=g["wte"])  # not final: see embedding
                dxf = k.matmul(dlogits, p["wte"])
                dx = k.layernorm_backward(dxf, ln_f, p["ln_f.weight"], g["ln_f.weight"], g["ln_f.bias"])
                ready(index["ln_f.bias"].index)
                ready(index["ln_f.weight"].index)
        else:
            dx = self._check_activation(dy)
        for layer in reversed(plan.layers):
            with span(f"backward.h.{layer}"):
                dx = self._block_backward(
                    layer,
                    dx,
                    saved.blocks[layer - plan.first_layer],
                    saved.attention,
                    ready,
                    saved.denominator,
                )
        if not plan.embedding:
            if plan.head:
                ready(index["wte"].index)  # the head's part only: its partner stage adds the embedding's
            return dx
        tokens = saved.tokens
        if tokens is None:
            raise UsageError("backward_stage: the forward it follows kept no tokens (another stage's?)")
        with span("backward.embedding"):
            T = tokens.shape[1]
            np.sum(dx, axis=0, out=g["wpe"][:T])
            g["wpe"][T:] = 0
            ready(index["wpe"].index)
            if not plan.head:
                g["wte"][...] = 0  # the output layer's part is on the last stage
            k.embedding_backward(g["wte"], tokens, dx)
            ready(index["wte"].index)
        if self.moe is not None:  # the experts lead the layout: last, once every block's are final
            for spec in reversed(index.specs):
                if is_expert(spec.name):
                    ready(spec.index)
        return None

    def _whole(self, what: str) -> None:
        if not self.plan.is_whole:
            raise UsageError(
                f"{what}() runs the whole model; this one holds {self.plan.describe()} "
                "(forward_stage / backward_stage run a stage)"
            )

    def _check_activation(self, x) -> np.ndarray:
        x = np.asarray(x)
        d, dtype = self.config.d_model, self.config.np_dtype
        if x.ndim != 3 or x.shape[2] != d or x.dtype != dtype or x.shape[1] > self.config.context:
            raise UsageError(
                f"a stage's input or output gradient must be {dtype} (batch, T <= {self.config.context}, "
                f"{d}), got {x.dtype} {x.shape}",
                field="inputs",
            )
        return x

    def _check_batch(self, tokens, targets) -> tuple[np.ndarray, np.ndarray]:
        tokens, targets = np.asarray(tokens), np.asarray(targets)
        if tokens.ndim != 2 or tokens.shape != targets.shape:
            raise UsageError(
                f"tokens and targets must both be (batch, T), got {tokens.shape} and {targets.shape}"
            )
        if tokens.shape[1] > self.config.context:
            raise UsageError(f"T={tokens.shape[1]} exceeds context={self.config.context}", field="tokens")
        return tokens, targets

    # ---- inference ------------------------------------------------------------------------------

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """(B, T) tokens -> (B, T, vocab_size) logits, the full causal forward (nothing kept)."""
        tokens, _ = self._check_batch(tokens, tokens)
        x = self._trunk(tokens, np.arange(tokens.shape[1]), CausalAttention(keep=False, kernels=self.kernels))
        return self._head(x)

    def step(self, tokens: np.ndarray, positions: np.ndarray, attend: Attend) -> np.ndarray:
        """Packed tokens (N,) at their `positions` (N,) in their sequences -> logits (N, vocab_size),
        attention by `attend` (see the module doc). Prefill and batched decode are both a step."""
        tokens, positions = np.asarray(tokens), np.asarray(positions)
        if tokens.ndim != 1 or positions.shape != tokens.shape:
            raise UsageError(f"tokens and positions must both be (N,), got {tokens.shape}, {positions.shape}")
        if positions.size and (positions.min() < 0 or positions.max() >= self.config.context):
            raise UsageError(f"must be in [0, context={self.config.context})", field="positions")
        x = self._trunk(tokens, positions, attend)
        return self._head(x)

    def _head(self, x: np.ndarray) -> np.ndarray:
        xf, _ = self.kernels.layernorm_forward(x, self.p["ln_f.weight"], self.p["ln_f.bias"])
        return self.kernels.matmul(xf, self.p["wte"].T)

    # ---- the blocks -----------------------------------------------------------------------------

    def _trunk(self, tokens, positions, attend: Attend) -> np.ndarray:
        """The embedding and every block, keeping nothing (inference: training's forward_stage
        keeps each block's activations for backward)."""
        self._whole("inference")
        x = self.p["wte"][tokens] + self.p["wpe"][positions]
        for layer in range(self.config.layers):
            x, _ = self._block_forward(layer, x, attend)
        return x

    def _block_forward(self, layer: int, x: np.ndarray, attend: Attend) -> tuple[np.ndarray, BlockSaved]:
        p, k = self._block_views(self.p, layer), self.kernels
        ln_1_out, ln_1 = k.layernorm_forward(x, p["ln_1.weight"], p["ln_1.bias"])
        qkv = k.linear_forward(ln_1_out, p["attn.c_attn.weight"], p["attn.c_attn.bias"])
        q, k_, v = split_heads(qkv, self.heads, self.config.head_dim)
        attn_y = attend(layer, q, k_, v).reshape(*x.shape[:-1], -1)
        x = self._projection(attn_y, p, "attn.c_proj", x, f"h.{layer}.attn.c_proj")
        ln_2_out, ln_2 = k.layernorm_forward(x, p["ln_2.weight"], p["ln_2.bias"])
        if self.moe is not None:  # the plan's experts in place of the MLP
            y, experts = self.moe.forward(layer, ln_2_out, self.p)
            return x + y, BlockSaved(ln_1, ln_1_out, attn_y, ln_2, ln_2_out, None, None, None, experts)
        fc_out = k.linear_forward(ln_2_out, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"])
        gelu_out, gelu_tanh = k.gelu_forward(fc_out)
        x = self._projection(gelu_out, p, "mlp.c_proj", x, f"h.{layer}.mlp.c_proj")
        return x, BlockSaved(ln_1, ln_1_out, attn_y, ln_2, ln_2_out, fc_out, gelu_tanh, gelu_out)

    def _projection(self, y: np.ndarray, p: dict, name: str, x: np.ndarray, where: str) -> np.ndarray:
        """The residual stream after a c_proj: x + (y W + b), in one kernel call; on a tensor-parallel
        shard the product is a partial sum, which the group completes (g) before the bias and the
        residual are added."""
        weight, bias = p[name + ".weight"], p[name + ".bias"]
        if not self.plan.tensor.is_split:
            return self.kernels.linear_forward(y, weight, bias, residual=x)
        h = self.all_reduce(self.kernels.matmul(y, weight), where)
        h += bias
        h += x
        return h

    def _block_backward(
        self,
        layer: int,
        dx: np.ndarray,
        s: BlockSaved,
        attention: CausalAttention,
        ready: GradReady,
        denominator: int = 1,
    ) -> np.ndarray:
        """dx of the block's output -> dx of its input; parameters announced in reverse layout order
        (`denominator`: the loss's, which the experts' balancing loss is divided by)."""
        p, g = self._block_views(self.p, layer), self._block_views(self.g, layer)
        first = self.layout[f"h.{layer}.ln_1.weight"].index

        def done(*suffixes: str) -> None:
            for suffix in suffixes:
                ready(first + BLOCK_INDEX[suffix])

        k = self.kernels
        if self.moe is not None:  # the router's gradient, and this rank's experts' (announced at the end)
            dln_2 = self.moe.backward(layer, dx, s.experts, self.p, self.g, denominator)
            ready(self.layout[f"h.{layer}.mlp.router.weight"].index)
        else:
            dgelu = k.linear_backward(
                dx, s.gelu_out, p["mlp.c_proj.weight"], g["mlp.c_proj.weight"], g["mlp.c_proj.bias"]
            )
            done("mlp.c_proj.bias", "mlp.c_proj.weight")
            dfc = k.gelu_backward(dgelu, s.fc_out, s.gelu_tanh, out=dgelu)
            dln_2 = k.linear_backward(
                dfc, s.ln_2_out, p["mlp.c_fc.weight"], g["mlp.c_fc.weight"], g["mlp.c_fc.bias"]
            )
            done("mlp.c_fc.bias", "mlp.c_fc.weight")
        dln_2 = self.all_reduce(dln_2, f"h.{layer}.mlp.c_fc gradient")  # f's backward: the shards' partials
        # the skip connection: the block's output gradient plus the layernorm's input gradient
        dx = k.layernorm_backward(
            dln_2, s.ln_2, p["ln_2.weight"], g["ln_2.weight"], g["ln_2.bias"], residual=dx
        )
        done("ln_2.bias", "ln_2.weight")
        dy = k.linear_backward(
            dx, s.attn_y, p["attn.c_proj.weight"], g["attn.c_proj.weight"], g["attn.c_proj.bias"]
        )
        done("attn.c_proj.bias", "attn.c_proj.weight")
        H, hd = self.heads, self.config.head_dim
        dqkv = np.empty((*dy.shape[:-1], 3 * H * hd), dtype=dy.dtype)  # dq, dk, dv land in its thirds
        attention.backward(layer, dy.reshape(*dy.shape[:-1], H, hd), out=split_heads(dqkv, H, hd))
        dln_1 = k.linear_backward(
            dqkv, s.ln_1_out, p["attn.c_attn.weight"], g["attn.c_attn.weight"], g["attn.c_attn.bias"]
        )
        done("attn.c_attn.bias", "attn.c_attn.weight")
        dln_1 = self.all_reduce(dln_1, f"h.{layer}.attn.c_attn gradient")
        dx = k.layernorm_backward(
            dln_1, s.ln_1, p["ln_1.weight"], g["ln_1.weight"], g["ln_1.bias"], residual=dx, out=dx
        )
        done("ln_1.bias", "ln_1.weight")
        return dx

    def _block_views(self, views: dict[str, np.ndarray], layer: int) -> dict[str, np.ndarray]:
        prefix = f"h.{layer}."
        return {suffix: views[prefix + suffix] for suffix, _ in BLOCK_PARAMS if prefix + suffix in views}


BLOCK_INDEX = {suffix: i for i, (suffix, _) in enumerate(BLOCK_PARAMS)}


def unsplit(x: np.ndarray, where: str = "") -> np.ndarray:
    """One shard: its partial sum is the sum."""
    return x


def split_heads(qkv: np.ndarray, heads: int, head_dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(..., 3 d) -> q, k, v each (..., heads, head_dim): views, as c_attn lays them out (q | k | v,
    each head a run of head_dim)."""
    split = qkv.reshape(*qkv.shape[:-1], 3, heads, head_dim)
    return split[..., 0, :, :], split[..., 1, :, :], split[..., 2, :, :]
