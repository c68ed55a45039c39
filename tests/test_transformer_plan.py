"""The plan: which blocks and ends each stage holds, the model running a range of blocks with an
input activation and returning its input's gradient, the activations it keeps counted exactly; and
the whole model's API unchanged by it."""

import numpy as np
import pytest

from playground.core.errors import ParamError, UsageError
from playground.transformer import BatchSampler, ModelConfig, ParamLayout, Transformer, lecture_bytes
from playground.transformer.plan import StagePlan, pipeline_plan

CONFIG = ModelConfig(layers=4, d_model=16, heads=2, context=16, dtype="float64")
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, 6, seed=1)


def test_blocks_and_ends_per_stage():
    plans = pipeline_plan(CONFIG, 4)
    assert [(p.first_layer, p.stop_layer) for p in plans] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert [(p.embedding, p.head) for p in plans] == [
        (True, False),
        (False, False),
        (False, False),
        (False, True),
    ]
    assert [p.tied_partner for p in plans] == [3, None, None, 0]
    names = [[n for n, _ in p.param_shapes(CONFIG)] for p in plans]
    assert names[0][:3] == ["wte", "wpe", "h.0.ln_1.weight"] and names[0][-1] == "h.0.mlp.c_proj.bias"
    assert names[1][0] == "h.1.ln_1.weight" and len(names[1]) == 12
    assert names[3][0] == "wte" and names[3][-2:] == ["ln_f.weight", "ln_f.bias"]
    whole = [s.name for s in ParamLayout.for_config(CONFIG)]
    assert sorted({n for stage in names for n in stage}) == sorted(whole)  # every parameter somewhere
    assert all(names[s] == [n for n in whole if n in names[s]] for s in range(4))  # in the model's order
    (one,) = pipeline_plan(CONFIG, 1)
    assert one == StagePlan.whole(CONFIG) and one.embedding and one.head and one.tied_partner is None
    assert [p.describe() for p in pipeline_plan(CONFIG, 2)] == [
        "stage 0: blocks 0-1 + embeddings",
        "stage 1: blocks 2-3 + head",
    ]


def test_stages_must_divide_the_layers():
    with pytest.raises(ParamError) as e:
        pipeline_plan(CONFIG, 3)
    assert e.value.field == "pipeline" and "3 stages must divide the model's 4 layers" in str(e.value)
    with pytest.raises(ParamError):
        pipeline_plan(CONFIG, 0)


def test_a_stage_holds_only_its_parameters_and_starts_as_one_process():
    whole = Transformer(CONFIG, seed=3)
    for plan in pipeline_plan(CONFIG, 2):
        stage = Transformer(CONFIG, seed=3, plan=plan)
        assert stage.params.size == plan.layout(CONFIG).num_elements < whole.params.size
        for name, view in stage.p.items():
            assert np.array_equal(view, whole.p[name])


@pytest.mark.parametrize("num_stages", [2, 4])
def test_stages_chained_compute_the_whole_models_loss_and_gradients(num_stages):
    """Forward through the stages and backward through them in reverse: the loss and every gradient
    are the whole model's bit for bit, but wte's, which is the sum of the first stage's (embedding)
    and the last stage's (output layer) halves, in another order."""
    inputs, targets = SAMPLER.rank_batch(0)
    whole = Transformer(CONFIG, seed=3)
    loss = whole.forward(inputs, targets)
    whole.backward()
    stages = [Transformer(CONFIG, seed=3, plan=p) for p in pipeline_plan(CONFIG, num_stages)]
    x, kept = inputs, []
    for stage in stages:
        x, saved = stage.forward_stage(x, targets)
        kept.append(saved)
    assert x == loss
    dy, order = None, {id(stage): [] for stage in stages}
    for stage, saved in zip(reversed(stages), reversed(kept), strict=True):
        dy = stage.backward_stage(
            saved, dy, lambda i, stage=stage: order[id(stage)].append(stage.layout[i].name)
        )
    assert dy is None  # the first stage has no input activation
    for stage in stages:
        for name, grad in stage.g.items():
            if name != "wte":
                assert np.array_equal(grad, whole.g[name]), name
    wte = stages[0].g["wte"] + stages[-1].g["wte"]
    assert np.max(np.abs(wte - whole.g["wte"])) <= 1e-15 * np.max(np.abs(whole.g["wte"]))
    # each stage announces its gradients in reverse layout order (its buckets are contiguous)
    for stage in stages:
        assert order[id(stage)] == [s.name for s in reversed(stage.layout.specs)]


def test_the_input_gradient_of_a_middle_stage_is_the_derivative():
    """Finite differences through a middle stage: <dx, v> = d/de loss(x + e v)."""
    plans = pipeline_plan(CONFIG, 4)
    first, middle, *rest = [Transformer(CONFIG, seed=4, plan=p) for p in plans]
    inputs, targets = SAMPLER.rank_batch(1)
    x0, _ = first.forward_stage(inputs)

    def loss_of(x):
        for stage in [middle, *rest]:
            x, _ = stage.forward_stage(x, targets)
        return x

    saved = []
    x = x0
    for stage in [middle, *rest]:
        x, s = stage.forward_stage(x, targets)
        saved.append(s)
    dy = None
    for stage, s in zip(reversed([middle, *rest]), reversed(saved), strict=True):
        dy = stage.backward_stage(s, dy)
    v = np.random.default_rng(0).standard_normal(x0.shape)
    eps = 1e-5
    numeric = (loss_of(x0 + eps * v) - loss_of(x0 - eps * v)) / (2 * eps)
    assert float(np.sum(dy * v)) == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("num_stages", [1, 2, 4])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_activations_kept_are_the_formula(num_stages, rows):
    inputs, targets = SAMPLER.rank_batch(2)
    inputs, targets = inputs[:rows, :10], targets[:rows, :10]
    x = inputs
    for plan in pipeline_plan(CONFIG, num_stages):
        stage = Transformer(CONFIG, seed=0, plan=plan)
        x, saved = stage.forward_stage(x, targets)
        assert saved.nbytes == plan.activation_bytes(CONFIG, rows, 10)
    per_token_block = 20 * 16 + 2 + 2 * 10  # 20 d + 2 + H T elements
    whole = StagePlan.whole(CONFIG).activation_bytes(CONFIG, 1, 10)
    assert whole == 10 * (4 * per_token_block * 8 + (2 * 16 + 1 + 256) * 8 + 8 + 8)


def test_the_whole_model_api_refuses_a_stage_and_stages_check_their_inputs():
    stage = Transformer(CONFIG, seed=0, plan=pipeline_plan(CONFIG, 2)[1])
    inputs, targets = SAMPLER.rank_batch(0)
    with pytest.raises(UsageError, match="holds stage 1: blocks 2-3 \\+ head"):
        stage.forward(inputs, targets)
    with pytest.raises(UsageError, match="inference"):
        stage.logits(inputs)
    with pytest.raises(UsageError, match="float64 \\(batch, T <= 16, 16\\)"):
        stage.forward_stage(inputs, targets)  # tokens given to a stage that takes activations
    with pytest.raises(UsageError, match="targets"):
        stage.forward_stage(np.zeros((6, 16, 16)))
    with pytest.raises(UsageError, match="blocks up to 6"):
        Transformer(CONFIG, plan=StagePlan(4, 6, 1, 2))
