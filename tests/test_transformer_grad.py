"""Backward by hand against central finite differences (float64), the loss scaling that makes a
sum over ranks the global mean, and the hand-over of each gradient the moment it is final."""

import numpy as np
import pytest

from playground.transformer import ModelConfig, Transformer

# Central differences in float64 with step H: truncation ~H^2 |f'''| ~ 1e-12, rounding ~ 1e-16 |loss|
# / H ~ 1e-10 absolute. The gradients here are 1e-3..1e-1, so each tensor's largest error stays
# below 1e-6 of its largest gradient (measured: <= 3e-10 absolute, <= 1e-7 relative).
H = 1e-6
REL_BOUND = 1e-6


def perturbed_model(config: ModelConfig, seed: int = 1) -> Transformer:
    """GPT-2's init plus noise, so that layernorm weights are not 1 and biases not 0 (a gradient
    that forgot a term involving them would still pass at the plain init)."""
    model = Transformer(config, seed=seed)
    model.params += np.random.default_rng(seed).standard_normal(model.params.size) * 0.1
    return model


def batch(config: ModelConfig, rows: int, seed: int = 0):
    windows = np.random.default_rng(seed).integers(0, config.vocab_size, (rows, config.context + 1))
    return windows[:, :-1], windows[:, 1:]


def loss_and_grads(model, inputs, targets, denominator=None):
    loss = model.forward(inputs, targets, loss_denominator=denominator)
    model.backward()
    return loss, model.grads.copy()


def finite_difference(model, inputs, targets, indices, denominator):
    out = np.empty(len(indices))
    for j, i in enumerate(indices):
        old = model.params[i]
        model.params[i] = old + H
        plus = model.forward(inputs, targets, loss_denominator=denominator)
        model.params[i] = old - H
        minus = model.forward(inputs, targets, loss_denominator=denominator)
        model.params[i] = old
        out[j] = (plus - minus) / (2 * H)
    return out


def check_every_tensor(model, inputs, targets, indices, denominator):
    _, analytic = loss_and_grads(model, inputs, targets, denominator)
    numeric = finite_difference(model, inputs, targets, indices, denominator)
    for spec in model.layout:
        mine = (indices >= spec.offset) & (indices < spec.stop)
        assert mine.any(), f"{spec.name} not checked"
        scale = np.abs(analytic[spec.offset : spec.stop]).max()
        assert scale > 0, f"{spec.name}: gradient is all zero"
        err = np.abs(numeric[mine] - analytic[indices[mine]]).max()
        assert err <= REL_BOUND * scale, f"{spec.name}: max error {err:.3g}, largest gradient {scale:.3g}"


def test_every_element_of_every_parameter_matches_finite_differences():
    """A tiny model (1,936 parameters, all checked), two layers so a block's input gradient is
    checked through the next block, and a loss denominator that is not the batch's token count."""
    config = ModelConfig(vocab_size=16, layers=2, d_model=8, heads=2, context=6, dtype="float64")
    model = perturbed_model(config)
    inputs, targets = batch(config, rows=3)
    check_every_tensor(model, inputs, targets, np.arange(model.params.size), denominator=40)


def test_a_sample_of_every_tensor_matches_at_full_vocabulary():
    """The byte vocabulary (256 rows of wte, most of them never an input) and 4 heads: 12 seeded
    elements of each tensor."""
    config = ModelConfig(layers=1, d_model=16, heads=4, context=8, dtype="float64")
    model = perturbed_model(config, seed=2)
    rng = np.random.default_rng(3)
    indices = np.concatenate([rng.integers(s.offset, s.stop, 12) for s in model.layout])
    check_every_tensor(model, *batch(config, rows=2, seed=4), indices, denominator=None)


def test_shorter_sequences_than_the_context_leave_the_unused_positions_at_zero_gradient():
    config = ModelConfig(vocab_size=16, layers=1, d_model=8, heads=2, context=6, dtype="float64")
    model = perturbed_model(config)
    inputs, targets = batch(config, rows=2)
    model.grads[:] = np.nan  # backward writes every element, it never adds to what was there
    model.forward(inputs[:, :4], targets[:, :4])
    model.backward()
    assert np.isfinite(model.grads).all()
    assert (model.g["wpe"][4:] == 0).all() and (model.g["wpe"][:4] != 0).all()


def test_loss_denominator_scales_loss_and_gradients():
    config = ModelConfig(vocab_size=32, layers=1, d_model=8, heads=2, context=5, dtype="float64")
    model = perturbed_model(config)
    inputs, targets = batch(config, rows=4)
    mean_loss, mean_grads = loss_and_grads(model, inputs, targets)
    scaled_loss, scaled_grads = loss_and_grads(model, inputs, targets, denominator=1000)
    ratio = inputs.size / 1000
    assert scaled_loss == pytest.approx(mean_loss * ratio, rel=1e-14)
    # atol: elements that are zero in exact arithmetic (the key bias: softmax ignores a constant
    # added to every score of a row) are rounding noise ~1e-21 that scaling does not reproduce
    np.testing.assert_allclose(
        scaled_grads, mean_grads * ratio, rtol=1e-12, atol=1e-12 * np.abs(mean_grads).max()
    )


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_rank_slices_with_the_global_denominator_sum_to_the_global_mean(ranks):
    """What data parallelism relies on: rank r computes on rows [r B/N, (r+1) B/N) dividing by
    the global token count; the SUM of the ranks' losses and gradients is the global mean."""
    config = ModelConfig(vocab_size=32, layers=2, d_model=8, heads=2, context=5, dtype="float64")
    model = perturbed_model(config)
    inputs, targets = batch(config, rows=12)
    global_loss, global_grads = loss_and_grads(model, inputs, targets)
    rows, loss_sum, grad_sum = 12 // ranks, 0.0, np.zeros_like(global_grads)
    for r in range(ranks):
        part = slice(r * rows, (r + 1) * rows)
        loss, grads = loss_and_grads(model, inputs[part], targets[part], denominator=inputs.size)
        loss_sum += loss
        grad_sum += grads
    assert loss_sum == pytest.approx(global_loss, rel=1e-13)
    assert np.abs(grad_sum - global_grads).max() <= 1e-13 * np.abs(global_grads).max()


def test_each_gradient_is_handed_over_once_in_reverse_layout_order_already_final():
    """At its callback a gradient is final: the callback takes a copy and then poisons the slice
    with NaN. Nothing written after the callback (the slice stays NaN) and nothing read after it
    (a NaN would spread into later gradients, whose copies then differ from a clean backward)."""
    config = ModelConfig(vocab_size=32, layers=3, d_model=8, heads=2, context=5, dtype="float64")
    model = perturbed_model(config)
    inputs, targets = batch(config, rows=3)
    _, clean = loss_and_grads(model, inputs, targets)

    order, copies = [], {}

    def on_grad_ready(index):
        spec = model.layout[index]
        order.append(index)
        copies[index] = model.grads[spec.offset : spec.stop].copy()
        model.grads[spec.offset : spec.stop] = np.nan

    model.forward(inputs, targets)
    model.backward(on_grad_ready)
    assert order == list(reversed(range(len(model.layout))))
    assert model.layout[order[-1]].name == "wte" and model.layout[order[0]].name == "ln_f.bias"
    assert np.isnan(model.grads).all()
    for spec in model.layout:
        np.testing.assert_array_equal(copies[spec.index], clean[spec.offset : spec.stop], err_msg=spec.name)


def test_backward_needs_a_forward_each_time():
    from playground.core.errors import UsageError

    model = Transformer(ModelConfig(vocab_size=16, layers=1, d_model=8, heads=2, context=4))
    with pytest.raises(UsageError):
        model.backward()
    model.forward(*batch(model.config, rows=1))
    model.backward()
    with pytest.raises(UsageError):
        model.backward()
