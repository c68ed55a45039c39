"""Adam on slices of the flat buffer: shard by shard is bit-identical to the whole, and N ranks'
summed gradients train like one process on the global batch."""

import numpy as np
import pytest

from playground.core.errors import ParamError, UsageError
from playground.transformer import (
    Adam,
    AdamConfig,
    BatchSampler,
    LRSchedule,
    ModelConfig,
    Transformer,
    lecture_bytes,
)
from playground.transformer.train import train_one_process


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Uneven shards on purpose (a ZeRO-1 shard need not be aligned to anything)."""
    cuts = np.linspace(0, n, shards + 1).astype(int)
    cuts[1:-1] += 3
    return list(zip(cuts[:-1], cuts[1:], strict=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shards", [1, 2, 3, 4, 7])
def test_shard_by_shard_is_bit_identical_to_the_whole_buffer(dtype, shards):
    rng = np.random.default_rng(0)
    n = 1001
    whole = rng.standard_normal(n).astype(dtype)
    sharded = whole.copy()
    config = AdamConfig(lr=3e-3)
    adam = Adam(n, dtype, config)
    shard_adams = [(lo, hi, Adam(hi - lo, dtype, config)) for lo, hi in shard_bounds(n, shards)]
    for _ in range(5):
        grads = rng.standard_normal(n).astype(dtype)
        adam.step(whole, grads)
        for lo, hi, a in shard_adams:
            a.step(sharded[lo:hi], grads[lo:hi])
    assert whole.tobytes() == sharded.tobytes()
    assert sum(a.state_bytes for *_, a in shard_adams) == adam.state_bytes


def test_the_update_is_torch_adams():
    """torch.optim.Adam's update (bias corrections on the step size and on sqrt(v)), written out."""
    rng = np.random.default_rng(1)
    p0, g1, g2 = rng.standard_normal((3, 10))
    c = AdamConfig(lr=0.01)
    p = p0.copy()
    adam = Adam(10, np.float64, c)
    adam.step(p, g1)
    adam.step(p, g2)
    m1, v1 = 0.1 * g1, 0.05 * g1**2
    m2, v2 = 0.9 * m1 + 0.1 * g2, 0.95 * v1 + 0.05 * g2**2
    x = p0 - c.lr / (1 - 0.9) * m1 / (np.sqrt(v1) / np.sqrt(1 - 0.95) + c.eps)
    x = x - c.lr / (1 - 0.9**2) * m2 / (np.sqrt(v2) / np.sqrt(1 - 0.95**2) + c.eps)
    np.testing.assert_allclose(p, x, rtol=1e-14)


def test_bad_settings_name_their_key():
    for kwargs, key in (
        ({"lr": 0}, "lr"),
        ({"beta1": 1.0}, "beta1"),
        ({"beta2": -0.1}, "beta2"),
        ({"eps": 0}, "eps"),
    ):
        with pytest.raises(ParamError) as e:
            AdamConfig(**kwargs)
        assert e.value.field == key
    with pytest.raises(UsageError):
        Adam(4, np.float64).step(np.zeros(4), np.zeros(5))


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_n_ranks_summing_their_gradients_train_like_one_process(ranks):
    """The check 'equal to one process' with the communication replaced by a sum: each
    rank's rows with the global denominator, gradients summed, Adam on the sum. Float64, 1e-10."""
    config = ModelConfig(layers=2, d_model=16, heads=2, context=8, dtype="float64")
    sampler = BatchSampler(lecture_bytes(), config.context, batch=12, seed=3)
    steps = 5
    reference, _ = train_one_process(config, sampler, steps, adam=AdamConfig(lr=1e-2), seed=4)

    replicas = [Transformer(config, seed=4) for _ in range(ranks)]
    adams = [Adam(config.num_params, config.np_dtype, AdamConfig(lr=1e-2)) for _ in range(ranks)]
    for step in range(steps):
        for r, model in enumerate(replicas):
            inputs, targets = sampler.rank_batch(step, r, ranks)
            model.forward(inputs, targets, loss_denominator=sampler.batch * config.context)
            model.backward()
        total = sum(m.grads for m in replicas)
        for model, adam in zip(replicas, adams, strict=True):
            adam.step(model.params, total)
    for model in replicas:
        assert model.params.tobytes() == replicas[0].params.tobytes()
    err = np.abs(replicas[0].params - reference.params).max() / np.abs(reference.params).max()
    assert err <= 1e-10


def test_the_schedule_warms_up_then_decays_to_min_lr():
    s = LRSchedule(lr=1e-2, steps=101, warmup_steps=10, min_lr=1e-3)
    assert [s.lr_at(i) for i in (0, 4, 9)] == pytest.approx([1e-3, 5e-3, 1e-2])  # linear to lr
    assert s.lr_at(10) == pytest.approx(1e-2)  # the decay starts at the peak
    assert s.lr_at(55) == pytest.approx((1e-2 + 1e-3) / 2)  # half way: the cosine's middle
    assert s.lr_at(100) == pytest.approx(1e-3) and s.lr_at(500) == pytest.approx(1e-3)  # min_lr at the end
    rates = [s.lr_at(i) for i in range(10, 101)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))  # never rises again
    constant = LRSchedule(lr=2e-3, steps=50)
    assert {constant.lr_at(i) for i in range(50)} == {2e-3}
    assert LRSchedule(lr=1e-2, steps=5, warmup_steps=5, min_lr=0.0).lr_at(4) == pytest.approx(1e-2)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"lr": 0}, "lr"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"min_lr": 1.0}, "min_lr"),
        ({"min_lr": -1e-3}, "min_lr"),
    ],
)
def test_a_bad_schedule_names_its_field(kwargs, field):
    with pytest.raises(ParamError) as e:
        LRSchedule(**{"lr": 1e-2, "steps": 10, **kwargs})
    assert e.value.field == field
