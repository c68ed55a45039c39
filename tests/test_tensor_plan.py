"""The tensor plan: which matrices split how (Megatron's columns then rows, c_attn by heads), a shard's
parameters cut from the whole model and put back; the model on t shards (threads of one process
over in-process transports) computing one process's loss, gradients and activations; composing
with a pipeline stage; bad splits named."""

import numpy as np
import pytest

from playground.collectives.tensor_allreduce import TensorAllReduce, allreduce_time_s
from playground.comm.group import Grid
from playground.comm.world import run_local
from playground.core.errors import ParamError, UsageError
from playground.models.costs import Link, allreduce_rd_time_s
from playground.transformer import (
    BatchSampler,
    ModelConfig,
    ParamLayout,
    Transformer,
    generate,
    lecture_bytes,
)
from playground.transformer.init import init_params
from playground.transformer.plan import StagePlan, pipeline_plan
from playground.transformer.tensor_plan import SPLITS, TensorPlan, check_tensor, split_of, tensor_plans

CONFIG = ModelConfig(layers=2, d_model=16, heads=4, context=16, dtype="float64")
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, 4, seed=1)
# Float64: the shards' partial sums are one process's products' terms added in another order;
# measured within 1e-15 of the largest gradient; the bound leaves room for other BLAS builds.
GRAD_TOLERANCE = 1e-13


def test_megatron_split_columns_then_rows_the_rest_replicated():
    d, t = CONFIG.d_model, 2
    shapes = dict(StagePlan.whole(CONFIG, TensorPlan(1, t)).param_shapes(CONFIG))
    assert shapes["h.0.attn.c_attn.weight"] == (d, 3 * d // t) and shapes["h.0.attn.c_attn.bias"] == (
        3 * d // t,
    )
    assert shapes["h.0.attn.c_proj.weight"] == (d // t, d) and shapes["h.0.attn.c_proj.bias"] == (d,)
    assert shapes["h.1.mlp.c_fc.weight"] == (d, 4 * d // t) and shapes["h.1.mlp.c_fc.bias"] == (4 * d // t,)
    assert shapes["h.1.mlp.c_proj.weight"] == (4 * d // t, d) and shapes["h.1.mlp.c_proj.bias"] == (d,)
    whole = dict(StagePlan.whole(CONFIG).param_shapes(CONFIG))
    replicated = [n for n in whole if split_of(n) is None]
    assert replicated == [n for n in whole if n in shapes and shapes[n] == whole[n]]
    assert {"wte", "wpe", "ln_f.weight", "h.0.ln_1.weight", "h.0.attn.c_proj.bias"} <= set(replicated)
    assert {s.style for s in SPLITS.values()} == {"columns", "rows"}
    assert [n for n in whole if split_of(n) and split_of(n).style == "rows"] == [
        f"h.{i}.{m}.c_proj.weight" for i in range(2) for m in ("attn", "mlp")
    ]


def test_a_shard_of_c_attn_is_q_k_and_v_of_its_own_heads():
    whole = np.arange(16 * 48, dtype=np.float64).reshape(16, 48)
    hd = CONFIG.head_dim
    for r, plan in enumerate(tensor_plans(CONFIG, 2)):
        mine = plan.shard("h.0.attn.c_attn.weight", whole)
        heads = slice(r * 2 * hd, (r + 1) * 2 * hd)  # heads 2r, 2r+1 of q, of k, of v
        assert np.array_equal(mine, np.concatenate([whole[:, i * 16 :][:, heads] for i in range(3)], axis=1))
        assert mine.flags.c_contiguous
    for name, shape in StagePlan.whole(CONFIG).param_shapes(CONFIG):
        value = np.random.default_rng(0).standard_normal(shape)
        for t in (1, 2, 4):
            pieces = [p.shard(name, value) for p in tensor_plans(CONFIG, t)]
            assert np.array_equal(TensorPlan(0, t).unshard(name, pieces), value), (name, t)


def test_shards_start_as_one_process_and_a_split_needs_its_all_reduce():
    whole = Transformer(CONFIG, seed=5)
    plan = StagePlan.whole(CONFIG, TensorPlan(1, 4))
    shard = Transformer(CONFIG, seed=5, plan=plan, all_reduce=lambda x, where: x)
    assert shard.heads == 1 and shard.params.size == plan.layout(CONFIG).num_elements < whole.params.size
    for name, view in shard.p.items():
        assert np.array_equal(view, plan.tensor.shard(name, whole.p[name])), name
    assert np.array_equal(plan.take(CONFIG, init_params(CONFIG, 5)), shard.params)
    with pytest.raises(UsageError, match="needs its tensor group's all_reduce"):
        Transformer(CONFIG, plan=plan)


@pytest.mark.parametrize("t,where", [(3, "tensor"), (8, "params.tensor")])
def test_t_must_divide_the_heads_named_by_the_key(t, where):
    with pytest.raises(ParamError) as e:
        check_tensor(CONFIG, t, where)
    assert e.value.field == where and f"t = {t} ranks must divide the model's 4 attention heads" in str(
        e.value
    )
    assert "e.g. 1, 2, 4" in str(e.value)
    with pytest.raises(ParamError):
        TensorPlan(2, 2)


def test_composes_with_a_pipeline_stage():
    plans = pipeline_plan(CONFIG, 2, tensor=TensorPlan(1, 2))
    assert [p.describe() for p in plans] == [
        "stage 0: blocks 0-0 + embeddings, shard 1 of 2",
        "stage 1: blocks 1-1 + head, shard 1 of 2",
    ]
    names = [n for n, _ in plans[1].param_shapes(CONFIG)]
    assert names[0] == "wte" and names[1] == "h.1.ln_1.weight"
    assert dict(plans[1].param_shapes(CONFIG))["h.1.mlp.c_fc.weight"] == (16, 32)
    whole = init_params(CONFIG, 0)
    views = ParamLayout.for_config(CONFIG).views(whole)
    got = plans[1].layout(CONFIG).views(plans[1].take(CONFIG, whole))
    assert np.array_equal(got["h.1.mlp.c_proj.weight"], views["h.1.mlp.c_proj.weight"][32:])


def run_shards(t: int, fn):
    """fn(model, grid) on t threads, each a shard of CONFIG (seed 3) over its tensor group."""

    def body(comm):
        grid = Grid(comm, tensor=t)
        plan = StagePlan.whole(CONFIG, TensorPlan(grid.tensor_index, t))
        return fn(Transformer(CONFIG, seed=3, plan=plan, all_reduce=TensorAllReduce(grid.tensor)), plan)

    return run_local(t, body, timeout_s=30)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("t", [2, 4])
def test_forward_and_backward_on_t_shards_are_one_process(t):
    """The loss on every shard and each shard's gradients, put back together, are one process's to
    rounding; the replicated parameters' gradients are bit-identical on every shard; each shard
    hands its gradients over in reverse layout order; its activations are the formula's bytes."""
    inputs, targets = SAMPLER.rank_batch(0)
    whole = Transformer(CONFIG, seed=3)
    loss = whole.forward(inputs, targets)
    whole.backward()

    def step(model, plan):
        order = []
        got = model.forward(inputs, targets)
        held = model._saved.nbytes
        model.backward(lambda i: order.append(model.layout[i].name))
        return got, {n: g.copy() for n, g in model.g.items()}, order, held, plan

    shards = run_shards(t, step)
    for got, _, order, held, plan in shards:
        assert got == pytest.approx(loss, rel=1e-15)
        assert order == [s.name for s in reversed(plan.layout(CONFIG).specs)]
        assert held == plan.activation_bytes(CONFIG, inputs.shape[0], inputs.shape[1])
    for name, g in whole.g.items():
        pieces = [grads[name] for _, grads, *_ in shards]
        if split_of(name) is None:
            assert all(np.array_equal(p, pieces[0]) for p in pieces), name
        joined = TensorPlan(0, t).unshard(name, pieces)
        assert np.max(np.abs(joined - g)) <= GRAD_TOLERANCE * np.max(np.abs(g)), name


def test_an_unsplit_plan_runs_the_operations_it_always_did():
    """t = 1 with an identity all-reduce: bit for bit the model without a plan."""
    inputs, targets = SAMPLER.rank_batch(1)
    a, b = (
        Transformer(CONFIG, seed=2),
        Transformer(CONFIG, seed=2, plan=StagePlan.whole(CONFIG, TensorPlan())),
    )
    assert a.forward(inputs, targets) == b.forward(inputs, targets)
    a.backward()
    b.backward()
    assert np.array_equal(a.grads, b.grads)


@pytest.mark.timeout(30)
def test_generate_on_two_shards_is_one_process_token_for_token():
    config = ModelConfig(layers=2, d_model=32, heads=4, context=24)  # float32, as served
    whole = Transformer(config, seed=7)
    want = generate(whole, "tensor", 30, temperature=1.0, seed=3)  # past the context: a recompute too

    def body(comm):
        plan = StagePlan.whole(config, TensorPlan(comm.rank, 2))
        model = Transformer(config, seed=7, plan=plan, all_reduce=TensorAllReduce(comm))
        return generate(model, "tensor", 30, temperature=1.0, seed=3)

    for got in run_local(2, body, timeout_s=30):
        assert got.tolist() == want.tolist()


def test_the_all_reduce_model_is_the_algorithm_auto_picks():
    link = Link(50e-6, 1e9)
    assert allreduce_time_s(8 * 512 * 4, 1, link) == 0.0
    assert allreduce_time_s(8 * 512 * 4, 4, link) == allreduce_rd_time_s(8 * 512 * 4, 4, link)


@pytest.mark.timeout(30)
def test_a_2x2_pipeline_x_tensor_grid_computes_one_process_gradients():
    """Two stages of two shards each: stage 0's shards send their (identical) activation to stage
    1's shard of the same index over `grid.pipeline`, the gradient comes back; wte's two halves are
    summed between the stages. Every shard's gradients, put back together, are one process's."""
    inputs, targets = SAMPLER.rank_batch(2)
    whole = Transformer(CONFIG, seed=3)
    loss = whole.forward(inputs, targets)
    whole.backward()

    def body(comm):
        grid = Grid(comm, pipeline=2, tensor=2)
        plan = pipeline_plan(CONFIG, 2, tensor=TensorPlan(grid.tensor_index, 2))[grid.pipeline_index]
        model = Transformer(CONFIG, seed=3, plan=plan, all_reduce=TensorAllReduce(grid.tensor))
        if plan.embedding:
            x, saved = model.forward_stage(inputs)
            grid.pipeline.send(np.ascontiguousarray(x), 1, 0)
            dy = grid.pipeline.recv(1, 1, out=np.empty_like(x))
            model.backward_stage(saved, dy)
            got = None
        else:
            x = grid.pipeline.recv(0, 0, out=np.empty((*inputs.shape, CONFIG.d_model)))
            got, saved = model.forward_stage(x, targets)
            grid.pipeline.send(np.ascontiguousarray(model.backward_stage(saved)), 0, 1)
        other = grid.pipeline.sendrecv(
            model.g["wte"].copy(), 1 - grid.pipeline_index, 1 - grid.pipeline_index, 2
        )
        model.g["wte"] += other
        return got, {n: g.copy() for n, g in model.g.items()}, grid.tensor_index

    ranks = run_local(4, body, timeout_s=30)
    assert all(got == pytest.approx(loss, rel=1e-15) for got, _, _ in ranks if got is not None)
    for name, g in whole.g.items():
        pieces: dict[int, np.ndarray] = {}
        for _, grads, shard in ranks:
            if name in grads:  # wte on both stages: the two copies' gradients are the same bits
                assert shard not in pieces or np.array_equal(pieces[shard], grads[name]), name
                pieces[shard] = grads[name]
        joined = TensorPlan(0, 2).unshard(name, [pieces[0], pieces[1]])
        assert np.max(np.abs(joined - g)) <= GRAD_TOLERANCE * np.max(np.abs(g)), name
