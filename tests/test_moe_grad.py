"""The mixture-of-experts model's backward by hand against central finite differences (float64), as
the dense model's is (test_transformer_grad.py): every element of every parameter of a tiny model,
router and experts included, dropless and with a capacity that drops, both permutations; the
balancing loss in the loss; and each gradient handed over once, in reverse layout order."""

import numpy as np
import pytest
from test_transformer_grad import batch, finite_difference

from playground.transformer import ModelConfig, Transformer
from playground.transformer.moe import ExpertPlan, MoEConfig
from playground.transformer.plan import StagePlan

CONFIG = ModelConfig(vocab_size=16, layers=2, d_model=8, heads=2, context=6, dtype="float64")
# as test_transformer_grad: each tensor's largest error below 1e-6 of its largest gradient
# (measured: <= 7e-8 relative)
REL_BOUND = 1e-6


def moe_model(moe: MoEConfig, permute: str = "sorted", seed: int = 1) -> Transformer:
    """GPT-2's init plus noise (layernorm weights not 1, biases not 0, a router that prefers)."""
    plan = StagePlan.whole(CONFIG, experts=ExpertPlan(moe))
    model = Transformer(CONFIG, seed=seed, plan=plan, permute=permute)
    model.params += np.random.default_rng(seed).standard_normal(model.params.size) * 0.1
    return model


@pytest.mark.parametrize("capacity_factor,permute", [(None, "sorted"), (1.0, "sorted"), (1.0, "gathered")])
def test_the_router_and_a_sample_of_every_tensor_match_finite_differences(capacity_factor, permute):
    """3 sequences of 6 tokens, 4 experts, top-2, a balancing loss weighted 0.1 so its gradient is
    not lost in the cross-entropy's; with capacity 1.0 (3 places an expert a sequence) assignments are
    dropped. Every element of the first block's router (whose gradient comes through the second
    block's experts, router and balancing loss) and 12 seeded elements of every other tensor."""
    moe = MoEConfig(experts=4, top_k=2, capacity_factor=capacity_factor, aux_loss_coef=0.1)
    model = moe_model(moe, permute)
    inputs, targets = batch(CONFIG, rows=3)
    model.grads[:] = np.nan  # backward writes every element
    model.forward(inputs, targets, loss_denominator=40)
    model.backward()
    analytic = model.grads.copy()
    assert np.isfinite(analytic).all()
    loads = model.moe.loads.record()
    kept, routed = np.array(loads["kept"]), np.array(loads["routed"])
    assert (kept < routed).any() == (capacity_factor is not None)
    router = model.layout["h.0.mlp.router.weight"]
    rng = np.random.default_rng(3)
    indices = np.unique(
        np.concatenate(
            [
                np.arange(router.offset, router.stop),
                *(rng.integers(s.offset, s.stop, 12) for s in model.layout),
            ]
        )
    )
    numeric = finite_difference(model, inputs, targets, indices, 40)
    for spec in model.layout:
        mine = (indices >= spec.offset) & (indices < spec.stop)
        scale = np.abs(analytic[spec.offset : spec.stop]).max()
        err = np.abs(numeric[mine] - analytic[indices[mine]]).max()
        assert err <= REL_BOUND * scale or err < 1e-12, f"{spec.name}: {err:.3g} vs {scale:.3g}"
    assert any(".experts." in s.name for s in model.layout) and "h.1.mlp.router.weight" in model.p


def test_the_balancing_loss_is_in_the_loss_and_its_gradient_in_the_routers():
    """The same model with the balancing loss's weight 0 and 0.5: the losses differ by exactly the
    layer's share, the routers' gradients differ, the experts' do not."""
    inputs, targets = batch(CONFIG, rows=2)
    runs = []
    for coef in (0.0, 0.5):
        model = moe_model(MoEConfig(experts=4, top_k=2, aux_loss_coef=coef))
        loss = model.forward(inputs, targets)
        model.backward()
        runs.append((loss, model.moe.aux_share, model))
    (loss0, aux0, m0), (loss1, aux1, m1) = runs
    assert aux0 == 0 and 0.5 <= aux1 <= 0.5 * 4 * CONFIG.layers
    assert loss1 == pytest.approx(loss0 + aux1, rel=1e-14)
    assert not np.allclose(m0.g["h.0.mlp.router.weight"], m1.g["h.0.mlp.router.weight"])
    last = "h.1.experts.mlp.c_fc.weight"  # the last block's: the balancing loss reaches the ones below
    np.testing.assert_array_equal(m0.g[last], m1.g[last])  # through the residual stream


def test_each_gradient_is_handed_over_once_in_reverse_layout_order_experts_last():
    model = moe_model(MoEConfig(experts=4, top_k=1))
    order: list[int] = []
    model.forward(*batch(CONFIG, rows=2))
    model.backward(order.append)
    assert order == list(reversed(range(len(model.layout))))
    names = [model.layout[i].name for i in order]
    assert names[0] == "ln_f.bias" and names[-1] == "h.0.experts.mlp.c_fc.weight"
    assert names.index("wte") == len(names) - 1 - 4 * CONFIG.layers  # then every block's experts
