"""The mixture-of-experts layer's pure parts: top-k, capacity by preference then position, the
balancing loss's two ends, the two permutations (equal to each other and to a loop over tokens),
the plan's parameters and shards, the routing workloads, the uneven all-to-all's cost, and bad
configurations named by their key."""

import math

import numpy as np
import pytest

from playground.core.errors import ParamError, UsageError
from playground.models.costs import Link
from playground.models.exchange_costs import alltoall_pairwise_time_s, alltoallv_time_s
from playground.training.experts.workloads import WORKLOADS
from playground.transformer import ModelConfig, Transformer
from playground.transformer.init import init_params
from playground.transformer.moe import ExpertPlan, LocalExchange, MoEConfig, MoELayer, is_expert
from playground.transformer.moe.routing import balance_forward, capacity_keep, top_k
from playground.transformer.plan import StagePlan

CONFIG = ModelConfig(vocab_size=16, layers=2, d_model=8, heads=2, context=8, dtype="float64")


def test_top_k_is_best_first_and_ties_go_to_the_lower_expert():
    scores = np.array([[0.1, 0.5, 0.5, -1.0], [2.0, 0.0, 1.0, 3.0]])
    assert top_k(scores, 2).tolist() == [[1, 2], [3, 0]]


def test_capacity_takes_every_first_choice_before_any_second_then_by_position():
    """One sequence of 4 tokens, 2 experts, top-2, capacity 2: expert 0 is first choice of tokens 2
    and 3 and second choice of tokens 0 and 1, so the first choices keep it and the others drop."""
    choice = np.array([[[1, 0], [1, 0], [0, 1], [0, 1]]])
    keep, routed = capacity_keep(choice, experts=2, capacity=2)
    assert keep[0].tolist() == [[True, False], [True, False], [True, False], [True, False]]
    assert routed.tolist() == [[4, 4]]
    keep, _ = capacity_keep(choice, experts=2, capacity=3)  # a third place: the first second choice
    assert keep[0, :, 1].tolist() == [True, False, True, False]  # of each: token 0's and token 2's
    assert capacity_keep(choice, 2, None)[0].all()
    assert MoEConfig(experts=8, top_k=2, capacity_factor=1.25).capacity(32) == math.ceil(1.25 * 32 * 2 / 8)


def test_the_balancing_loss_is_one_when_even_and_E_when_one_expert_takes_all():
    E, T, k = 4, 8, 1
    even = np.full((1, T, E), 1 / E)
    total, _ = balance_forward(even, np.full((1, E), T // E), k)
    assert total / T == pytest.approx(1.0)
    onto_one = np.zeros((1, T, E))
    onto_one[..., 0] = 1
    total, _ = balance_forward(onto_one, np.array([[T, 0, 0, 0]]), k)
    assert total / T == pytest.approx(E)


def _loop_over_tokens(x2, choice, gates, keep, w):
    """The layer's output computed token by token: the definition both permutations must meet."""
    out = np.zeros_like(x2)
    for t in range(x2.shape[0]):
        for j in range(choice.shape[1]):
            if keep[t, j]:
                e = choice[t, j]
                h = x2[t] @ w["c_fc.weight"][e] + w["c_fc.bias"][e]
                g = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
                out[t] += gates[t, j] * (g @ w["c_proj.weight"][e] + w["c_proj.bias"][e])
    return out


@pytest.mark.parametrize("capacity_factor", [None, 0.75])
def test_both_permutations_equal_a_loop_over_tokens_forward_and_backward(capacity_factor):
    moe = MoEConfig(experts=4, top_k=2, capacity_factor=capacity_factor)
    plan = StagePlan.whole(CONFIG, experts=ExpertPlan(moe))
    params = plan.initial_params(CONFIG, seed=1)
    params += np.random.default_rng(2).standard_normal(params.size) * 0.1
    views = plan.layout(CONFIG).views(params)
    x = np.random.default_rng(3).standard_normal((3, 8, 8))
    dout = np.random.default_rng(4).standard_normal(x.shape)
    results = []
    for permute in ("sorted", "gathered"):
        layer = MoELayer(ExpertPlan(moe), LocalExchange(), permute)
        y, saved = layer.forward(1, x, views)
        grads = {k: np.zeros_like(v) for k, v in views.items()}
        dx = layer.backward(1, dout, saved, views, grads, denominator=24)
        results.append((y, dx, grads, saved))
        w = {
            s: views[f"h.1.experts.mlp.{s}"]
            for s in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")
        }
        gates = np.take_along_axis(saved.probs, saved.choice, -1)
        expected = _loop_over_tokens(x.reshape(-1, 8), saved.choice, gates, saved.keep, w)
        np.testing.assert_allclose(y.reshape(-1, 8), expected, rtol=1e-12, atol=1e-14)
        assert (saved.keep.sum() < saved.keep.size) == (capacity_factor is not None)
    (y0, dx0, g0, _), (y1, dx1, g1, _) = results
    np.testing.assert_allclose(y1, y0, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(dx1, dx0, rtol=1e-12, atol=1e-14)
    for name in g0:
        np.testing.assert_allclose(g1[name], g0[name], rtol=1e-12, atol=1e-14, err_msg=name)


def test_the_plan_puts_the_experts_first_and_each_rank_holds_its_share():
    moe = MoEConfig(experts=4, top_k=1)
    whole = StagePlan.whole(CONFIG, experts=ExpertPlan(moe))
    names = [n for n, _ in whole.param_shapes(CONFIG)]
    assert names[:4] == [
        f"h.0.experts.mlp.{s}" for s in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")
    ]
    assert all(is_expert(n) for n in names[:8]) and not any(is_expert(n) for n in names[8:])
    assert "h.0.mlp.c_fc.weight" not in names and "h.0.mlp.router.weight" in names
    shapes = dict(whole.param_shapes(CONFIG))
    assert shapes["h.1.experts.mlp.c_proj.weight"] == (4, 32, 8) and shapes["h.1.mlp.router.weight"] == (8, 4)
    full = init_params(CONFIG, 0, whole.model_shapes(CONFIG))
    views = whole.layout(CONFIG).views(full)
    for r in range(2):
        plan = StagePlan.whole(CONFIG, experts=ExpertPlan(moe, r, 2))
        assert plan.describe().endswith(f"experts {2 * r}-{2 * r + 1} of 4")
        mine = plan.layout(CONFIG).views(plan.initial_params(CONFIG, 0))
        np.testing.assert_array_equal(
            mine["h.0.experts.mlp.c_fc.bias"], views["h.0.experts.mlp.c_fc.bias"][2 * r : 2 * r + 2]
        )
        np.testing.assert_array_equal(mine["wte"], views["wte"])
    with pytest.raises(UsageError, match="all-to-all"):
        Transformer(CONFIG, plan=StagePlan.whole(CONFIG, experts=ExpertPlan(moe, 0, 2)))


def test_workloads_push_the_routing_where_they_say():
    T, E, k, P = 8, 4, 2, 2
    layer = MoELayer(ExpertPlan(MoEConfig(experts=E, top_k=k)))
    plan = StagePlan.whole(CONFIG, experts=layer.plan)
    views = plan.layout(CONFIG).views(plan.initial_params(CONFIG, 0))
    x = np.random.default_rng(0).standard_normal((2, T, 8))
    chosen = {}
    for name, w in WORKLOADS.items():
        layer.begin(w.bias(3, T, E, k, P))
        layer.forward(0, x, views)
        chosen[name] = layer.loads.record()["kept"][0]
    assert chosen["balanced"] == [8, 8, 8, 8]
    assert chosen["hot_expert"][0] == 16 and chosen["moving"][3] == 16  # step 3: expert 3
    assert chosen["hot_rank"] == [16, 16, 0, 0]  # both choices on rank 0's experts 0 and 1


def test_an_uneven_all_to_all_costs_its_busiest_ranks_messages():
    link = Link(1e-5, 1e9)
    assert alltoallv_time_s([(300.0, 300.0)] * 4, link) == pytest.approx(
        alltoall_pairwise_time_s(400, 4, link)
    )
    hot = [(0.0, 3000.0), (1000.0, 0.0), (1000.0, 0.0), (1000.0, 0.0)]  # rank 0 receives everything
    assert alltoallv_time_s(hot, link) == pytest.approx(3 * 1e-5 + 3000 / 1e9)
    assert alltoallv_time_s([(5.0, 5.0)], link) == 0.0


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"capacity_factor": 0.0}, "capacity_factor"),
        ({"capacity_factor": -1.0}, "capacity_factor"),
        ({"top_k": 9}, "top_k"),
        ({"experts": 0}, "experts"),
        ({"aux_loss_coef": -0.1}, "aux_loss_coef"),
    ],
)
def test_bad_configurations_name_their_key(kwargs, key):
    with pytest.raises(ParamError) as e:
        MoEConfig(**{"experts": 8, "top_k": 2, **kwargs})
    assert e.value.field == key


def test_more_experts_than_a_sequences_tokens_or_an_uneven_split_is_refused():
    with pytest.raises(ParamError, match="more than the 8 tokens") as e:
        MoEConfig(experts=16).check_tokens(8)
    assert e.value.field == "experts"
    with pytest.raises(ParamError, match="must divide the 8 experts") as e:
        ExpertPlan(MoEConfig(experts=8), 0, 3)
    assert e.value.field == "expert_parallel"
