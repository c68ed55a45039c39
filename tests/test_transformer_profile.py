"""The step profile (transformer/profile.py): every kernel call counted once in its group, the
products' FLOPs the model's closed form, and the groups adding up to forward + backward."""

import pytest

from playground.transformer import BatchSampler, ModelConfig, lecture_bytes
from playground.transformer.init import init_params
from playground.transformer.profile import GROUPS, profile_steps

CONFIG = ModelConfig(layers=2, d_model=16, heads=2, context=8)


@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_the_profile_counts_each_call_and_the_models_flops(kernels):
    B, T, d, L, V = 3, CONFIG.context, CONFIG.d_model, CONFIG.layers, CONFIG.vocab_size
    tokens, targets = BatchSampler(lecture_bytes(), T, B).rank_batch(0)
    p = profile_steps(CONFIG, init_params(CONFIG, 0), tokens, targets, 2, kernels=kernels)
    g = p.groups
    assert list(g) == list(GROUPS) and p.optimizer.calls == 1
    # per block: 2 linear forwards, 2 bare products (the c_proj), 4 linear backwards; the head: its
    # product forward, two backward (wte's gradient, the input's)
    assert g["matmul"].calls == L * (2 + 2 + 4) + 3
    N = B * T
    assert g["matmul"].flops == 6 * N * 12 * d * d * L + 6 * N * d * V  # 2 m n k forward, twice that back
    assert g["attention"].calls == 2 * L
    assert g["attention"].flops == 3 * 4 * B * CONFIG.heads * T * T * CONFIG.head_dim * L
    assert g["layernorm"].calls == 2 * (2 * L + 1) and g["gelu"].calls == 2 * L and g["loss"].calls == 2
    assert g["embedding"].calls == 1 and g["layernorm"].bytes > 0 and g["other"].calls == 0
    assert sum(v.seconds for v in g.values()) == pytest.approx(p.forward_backward_s, rel=1e-9)
