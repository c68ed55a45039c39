"""Data-parallel training equals one process on the global batch, in every mode and at every rank
count, and every rank holds the same parameters after every step; the buckets are DDP's."""

import dataclasses

import numpy as np
import pytest

from playground.collectives.chunks import ChunkBounds
from playground.comm.world import run_local
from playground.training.loop import train_mode
from playground.training.modes import BY_NAME, MODES, NAMES, Mode
from playground.training.reducer import AllReduceBuckets, bucket_of_param
from playground.training.step import TrainSetup
from playground.training.zero import ZeroOne
from playground.training.zero2 import ZeroTwo
from playground.training.zero3 import ZeroThree
from playground.transformer import (
    AdamConfig,
    BatchSampler,
    LRSchedule,
    ModelConfig,
    ParamLayout,
    Transformer,
    lecture_bytes,
    pin_blas_threads,
)
from playground.transformer.train import train_one_process

CONFIG = ModelConfig(layers=1, d_model=16, heads=2, context=16, dtype="float64")
BATCH, STEPS = 12, 3  # 12 rows: divisible by 1, 2, 3 and 4 ranks
ADAM = AdamConfig(lr=1e-2)
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, BATCH, seed=3)
SETUP = TrainSetup(CONFIG, ADAM, 1, BATCH * CONFIG.context, bucket_cap_bytes=2048, first_bucket_bytes=512)


@pytest.fixture(scope="module")
def one_process():
    with pin_blas_threads(1):
        return train_one_process(CONFIG, SAMPLER, STEPS, adam=ADAM, seed=1)


def train_on(n: int, mode: str, setup: TrainSetup = SETUP) -> list[tuple[dict, np.ndarray]]:
    def body(comm):
        record, dp = train_mode(comm, BY_NAME[mode], setup, SAMPLER, STEPS)
        return record, dp.gradients.full_params()  # zero3: its shards gathered

    with pin_blas_threads(1):
        return run_local(n, body)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", NAMES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_n_ranks_equal_one_process_on_the_global_batch(one_process, mode, n):
    """Measured: 5e-15 to 1.1e-14 of the largest parameter after 3 steps (the bound is 1e-10);
    the losses within 4e-16. Relative to the largest parameter, not element by element: some
    gradients are 0 in exact arithmetic (the key bias) and their elements are rounding noise."""
    ref, ref_losses = one_process
    out = train_on(n, mode)
    scale = np.max(np.abs(ref.params))
    for record, params in out:
        assert np.max(np.abs(params - ref.params)) <= 1e-10 * scale
        losses = [s["loss"] for s in record["steps"]]
        assert losses == pytest.approx(ref_losses, rel=1e-12)
    assert all(p.tobytes() == out[0][1].tobytes() for _, p in out)  # every rank bit-identical
    assert len({record["hash"] for record, _ in out}) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["bucketed", "zero1"])
def test_a_learning_rate_schedule_is_applied_alike_by_the_ranks_and_one_process(one_process, mode):
    """Warm-up then cosine decay: every rank steps at the rate one process steps at, in both kinds
    of strategy (ZeRO-1's shards too), so they still end equal; and it is not the constant rate."""
    schedule = LRSchedule(ADAM.lr, STEPS, warmup_steps=2, min_lr=1e-3)
    with pin_blas_threads(1):
        ref, _ = train_one_process(CONFIG, SAMPLER, STEPS, adam=ADAM, seed=1, schedule=schedule)
    out = train_on(2, mode, dataclasses.replace(SETUP, schedule=schedule))
    scale = np.max(np.abs(ref.params))
    for _, params in out:
        assert np.max(np.abs(params - ref.params)) <= 1e-10 * scale
    assert out[0][1].tobytes() == out[1][1].tobytes()
    assert np.max(np.abs(ref.params - one_process[0].params)) > 1e-6 * scale  # the schedule changed it


@pytest.mark.timeout(60)
def test_modes_agree_with_each_other_in_float32():
    """The same update whatever the communication: the modes' parameters differ by rounding only."""
    setup = dataclasses.replace(SETUP, config=dataclasses.replace(CONFIG, dtype="float32"))
    finals = {mode: train_on(3, mode, setup)[0][1] for mode in NAMES}
    base = finals["after_backward"]
    for params in finals.values():
        assert np.max(np.abs(params - base)) <= 1e-5 * np.max(np.abs(base))


def plan(layout: ParamLayout, itemsize: int, mode: str, cap: int = 0, first: int | None = None):
    """`mode`'s buckets over `layout`'s gradients in backward order, as `Mode.gradients` plans them."""
    return BY_NAME[mode].plan([s.size * itemsize for s in reversed(layout.specs)], cap, first)


def element_range(layout: ParamLayout, bucket, itemsize: int) -> tuple[int, int]:
    """[start, stop) of the bucket's slice of a gradient buffer in layout order."""
    view = bucket.view(np.arange(layout.num_elements, dtype=f"f{itemsize}"), forward=True)
    return int(view[0]), int(view[0]) + view.size


def test_buckets_follow_ddp_order_and_caps():
    layout = ParamLayout.for_config(ModelConfig(dtype="float64"))
    buckets = plan(layout, 8, "bucketed", 128 << 10, 32 << 10)
    # what torch 2.13's DDP built for this model, float64, bucket_cap 128 KiB, first 32 KiB (its
    # rebuilt buckets, from the comm hook's bucket.buffer() sizes)
    assert [b.num_bytes / 1024 for b in buckets] == [129.5, 130, 131, 129.5, 130, 131, 161]
    covered = sorted(element_range(layout, b, 8) for b in buckets)
    assert covered[0][0] == 0 and covered[-1][1] == layout.num_elements
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))  # contiguous, once each
    for b in buckets:  # each bucket's slice is exactly its parameters' slices
        specs = [layout.specs[len(layout) - 1 - t] for t in b.tensor_indices]
        assert element_range(layout, b, 8) == (min(s.offset for s in specs), max(s.stop for s in specs))
    of = bucket_of_param(layout, buckets)
    order = sorted(of, key=lambda p: (of[p], -p))
    assert order == list(reversed(range(len(layout))))  # backward order: ln_f.bias first, wte last
    assert of[layout["wte"].index] == buckets[-1].index and of[len(layout) - 1] == 0


def test_per_tensor_and_single_buckets():
    layout = ParamLayout.for_config(ModelConfig())
    assert len(plan(layout, 4, "per_tensor")) == len(layout) == 28
    (one,) = plan(layout, 4, "after_backward")
    assert element_range(layout, one, 4) == (0, layout.num_elements)
    assert plan(layout, 4, "zero1") == [one]
    large = ParamLayout.for_config(ModelConfig(layers=8, d_model=512, heads=8, context=128))
    sizes = [round(b.num_bytes / 2**20, 2) for b in plan(large, 4, "bucketed", 25 << 20, 1 << 20)]
    assert sizes == [4.01, 28.06, 25.06, 27.06, 12.78]  # DDP's defaults on train-large


def test_a_bucket_goes_to_the_thread_when_its_last_gradient_is_ready():
    """The strategy counts each bucket's gradients down in the order backward announces them."""
    model = Transformer(CONFIG, seed=0)
    announced, submitted = [], []

    class Recorder:
        def submit(self, b, step):
            submitted.append((b, announced[-1], step))

    def body(comm):
        gradients = BY_NAME["bucketed"].gradients(comm, model, SETUP)
        gradients.thread.close()
        gradients.thread = Recorder()
        gradients.begin(5)

        def ready(index):
            announced.append(index)
            gradients.on_grad_ready(index)

        inputs, targets = SAMPLER.rank_batch(0)
        model.forward(inputs, targets)
        model.backward(ready)
        return gradients.buckets

    (buckets,) = run_local(1, body)
    assert len(buckets) > 2
    assert [b for b, _, _ in submitted] == [b.index for b in buckets]
    backward = list(reversed(model.layout.specs))
    assert [last for _, last, _ in submitted] == [backward[b.last].index for b in buckets]
    assert {step for _, _, step in submitted} == {5}


def test_every_mode_carries_its_strategy():
    names = ["per_tensor", "bucketed", "after_backward", "zero1", "zero2", "zero3"]
    assert [m.name for m in MODES] == list(NAMES) == names
    assert [m.strategy for m in MODES] == [AllReduceBuckets] * 3 + [ZeroOne, ZeroTwo, ZeroThree]
    assert [(m.overlaps, m.stage, m.sharded) for m in MODES] == [
        (True, 0, False),
        (True, 0, False),
        (False, 0, False),
        (False, 1, True),
        (True, 2, True),
        (True, 3, True),
    ]
    assert Mode.parse_param("zero1") is BY_NAME["zero1"] and BY_NAME["zero1"].to_param() == "zero1"
    with pytest.raises(
        ValueError,
        match="expected one of 'per_tensor', 'bucketed', 'after_backward', 'zero1', 'zero2', 'zero3'",
    ):
        Mode.parse_param("ddp")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero1_keeps_one_nth_of_adams_states(n):
    out = train_on(n, "zero1")
    bounds = ChunkBounds(CONFIG.num_params, n)
    for r, (record, _) in enumerate(out):
        a, b = bounds[r]
        assert record["memory"]["optimizer_bytes"] == 2 * (b - a) * 8
        assert record["memory"]["params_bytes"] == record["memory"]["grads_bytes"] == CONFIG.num_params * 8
    replicated = train_on(n, "bucketed")[0][0]["memory"]["optimizer_bytes"]
    assert sum(rec["memory"]["optimizer_bytes"] for rec, _ in out) == replicated == 2 * CONFIG.num_params * 8
