"""ZeRO-2 and ZeRO-3: equal to one process in float64 (every prefetch, resharding, unit size and
gradient accumulation; alone and on data x pipeline and data x tensor grids), the model state and the
bytes sent against the formulas, the units' schedule and its timeline as data, bad input in one line,
and torch's FSDP2 on the same weights and batches."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from tools import NO_TORCH, importable, need

from nodes.train import Params
from playground import cli
from playground.comm.group import Grid
from playground.comm.world import run_local
from playground.core.errors import ParamError
from playground.training import fsdp_baseline
from playground.training.loop import one_process, train_mode
from playground.training.modes import BY_NAME, NAMES
from playground.training.pipeline.loop import reference_gaps, train_schedule
from playground.training.pipeline.schedules import SCHEDULES
from playground.training.step import TrainSetup
from playground.training.tensor.loop import train_tensor
from playground.training.unit_steptime import unit_timeline
from playground.training.units import Sharding, UnitPlan
from playground.training.zero_formulas import (
    model_state_bytes,
    model_state_formula,
    sent_bytes_per_rank,
    sent_formula,
)
from playground.transformer import (
    AdamConfig,
    BatchSampler,
    ModelConfig,
    ParamLayout,
    lecture_bytes,
    pin_blas_threads,
)
from playground.transformer.moe import ExpertPlan, MoEConfig
from playground.transformer.plan import StagePlan, pipeline_plan

CONFIG = ModelConfig(layers=4, d_model=16, heads=2, context=16, dtype="float64")
BATCH, STEPS = 8, 2  # 8 rows: divisible by 1, 2 and 4 ranks, and by 2 micro-batches on 4 ranks
SAMPLER = BatchSampler(lecture_bytes(), CONFIG.context, BATCH, seed=3)
SETUP = TrainSetup(CONFIG, AdamConfig(lr=1e-2), 1, BATCH * CONFIG.context, 2048, 512)
TOLERANCE = 1e-10  # of the largest parameter (measured: 1e-15 to 6e-14), as tests/test_training_step.py


@pytest.fixture(scope="module")
def reference():
    with pin_blas_threads(1):
        return one_process(SETUP, SAMPLER, STEPS)


def train_on(n: int, mode: str, setup: TrainSetup = SETUP):
    """Every rank's (record, its parameters gathered whole after the last step)."""

    def body(comm):
        record, dp = train_mode(comm, BY_NAME[mode], setup, SAMPLER, STEPS)
        return record, dp.gradients.full_params()

    with pin_blas_threads(1):
        return run_local(n, body)


def assert_equal_to_one_process(out, reference) -> None:
    scale = np.max(np.abs(reference.params[-1]))
    for record, params in out:
        assert np.max(np.abs(params - reference.params[-1])) <= TOLERANCE * scale
        assert [s["loss"] for s in record["steps"]] == pytest.approx(reference.losses, rel=1e-12)


VARIANTS = {
    "defaults": Sharding(),
    "no prefetch": Sharding(prefetch=0),
    "prefetch 2": Sharding(prefetch=2),
    "kept after forward": Sharding(reshard_after_forward=False),
    "no wrapping": Sharding(unit_blocks=0),
    "units of 3 blocks": Sharding(unit_blocks=3),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("n", [2, 4])
def test_zero3_equals_one_process_however_it_gathers(reference, n, variant):
    out = train_on(n, "zero3", dataclasses.replace(SETUP, sharding=VARIANTS[variant]))
    assert_equal_to_one_process(out, reference)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["bucketed", "zero1", "zero2", "zero3"])
@pytest.mark.parametrize("n", [2, 4])
def test_gradient_accumulation_equals_one_process(reference, n, mode):
    """Two micro-batches a step: the replicated modes and ZeRO-1 add them up and reduce once, ZeRO-2
    and ZeRO-3 reduce-scatter each into the shard; the same update."""
    out = train_on(n, mode, dataclasses.replace(SETUP, micro_batches=2))
    assert_equal_to_one_process(out, reference)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 4])
def test_model_state_and_bytes_sent_against_the_formulas(n):
    """Per rank the state kept between steps is the formula's within 1% (the ranks' chunks differ by
    an element per unit; summed over the ranks it is exact); the bytes a step sends, summed over the
    ranks, are exactly the formula's (N - 1) x volumes x Psi b; ZeRO-3 holds the units its schedule
    says at once."""
    psi, b = CONFIG.num_params, 8
    for mode in NAMES:
        stage = BY_NAME[mode].stage
        out = train_on(n, mode)
        states = [
            sum(r["memory"][k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes")) for r, _ in out
        ]
        formula = model_state_bytes(stage, psi, n, b)
        assert all(abs(s / formula - 1) <= 0.01 for s in states), (mode, states, formula)
        assert sum(states) == pytest.approx(n * formula, rel=1e-12)  # the shards partition the whole
        for step in range(STEPS):
            sent = [r["steps"][step]["sent_bytes"] for r, _ in out]
            assert sum(sent) == n * sent_bytes_per_rank(stage, psi, n, b), (mode, step, sent)
    plan = UnitPlan(ParamLayout.for_config(CONFIG), 1, n)
    memory = out[0][0]["memory"]  # zero3, the last: the embedding's unit and a block, the next prefetched
    assert memory["peak_param_units"] == 3
    assert memory["peak_param_unit_bytes"] == b * max(
        plan.units[0].size + plan.units[i].size + plan.units[i + 1].size for i in range(1, len(plan) - 1)
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sharding,units",
    [(Sharding(prefetch=0), 2), (Sharding(prefetch=2), 4), (Sharding(reshard_after_forward=False), 5),
     (Sharding(unit_blocks=0), 1)],
)  # fmt: skip
def test_the_units_whole_at_once_follow_prefetch_and_resharding(sharding, units):
    (record, _), _ = train_on(2, "zero3", dataclasses.replace(SETUP, sharding=sharding))
    assert record["memory"]["peak_param_units"] == units


@pytest.mark.timeout(60)
def test_zero2_with_accumulation_sends_a_reduce_scatter_per_micro_batch():
    """The pathology: ZeRO-2 cannot add micro-batches up in a whole gradient, so m = 2 sends 3 volumes
    (two reduce-scatters, an all-gather) where bucketed sends 2; ZeRO-3 sends 3 m."""
    setup = dataclasses.replace(SETUP, micro_batches=2)
    psi = CONFIG.num_params
    for mode, volumes in (("bucketed", 2), ("zero2", 3), ("zero3", 6)):
        out = train_on(2, mode, setup)
        assert sum(r["steps"][-1]["sent_bytes"] for r, _ in out) == volumes * psi * 8, mode


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_a_data_x_tensor_grid_equals_one_process(reference, mode):
    """2 replicas x 2 shards: each shard's units sharded over its data group, ZeRO-3 gathering them
    on the main thread between the tensor all-reduces; the shards' replicated parameters agree."""

    def body(comm):
        grid = Grid(comm, data=2, tensor=2)
        return train_tensor(comm, grid, BY_NAME[mode], SETUP, SAMPLER, STEPS, reference=reference)[
            "reference"
        ]

    with pin_blas_threads(1):
        for gaps in run_local(4, body):
            assert gaps["param_gap"] <= TOLERANCE and gaps["loss_gap"] <= 1e-12


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_a_data_x_pipeline_grid_equals_one_process(mode):
    """2 replicas x 2 stages, 1F1B over 2 micro-batches: each stage's units sharded over its data
    group (ZeRO-3: gathered for each micro-batch's pieces); the tied embedding's copies agree."""

    def body(comm):
        grid = Grid(comm, data=2, pipeline=2)
        plan = pipeline_plan(CONFIG, 2)[grid.pipeline_index]
        record, snapshots = train_schedule(
            comm, grid, plan, BY_NAME[mode], SETUP, SAMPLER, STEPS, SCHEDULES["1f1b"], 2, 0, keep_params=True
        )
        losses = [s["loss"] for s in record["steps"]]
        return reference_gaps(SETUP, SAMPLER, plan, STEPS, [(losses, snapshots)])[0]

    with pin_blas_threads(1):
        for gaps in run_local(4, body):
            assert gaps["param_gap"] <= TOLERANCE
            assert gaps["loss_gap"] is None or gaps["loss_gap"] <= 1e-12


# -- the units and their schedule, as data ---------------------------------------------------------
def test_units_are_blocks_with_the_embedding_apart():
    layout = ParamLayout.for_config(CONFIG)
    plan = UnitPlan(layout, 1, 4)
    assert [u.label for u in plan.units] == ["wte", "h.0 + wpe", "h.1", "h.2", "h.3 + ln_f"]
    assert plan.units[0].start == 0 and plan.units[-1].stop == layout.num_elements
    assert all(a.stop == b.start for a, b in zip(plan.units, plan.units[1:], strict=False))  # contiguous
    assert plan.gather_order("forward") == [0, 1, 2, 3, 4] and plan.gather_order("backward") == [
        0,
        4,
        3,
        2,
        1,
    ]
    assert plan.needs("forward.head") == (0, 4) and plan.needs("backward.embedding") == (0, 1)
    assert plan.last_use("forward") == {
        "forward.h.0": (1,),
        "forward.h.1": (2,),
        "forward.h.2": (3,),
        "forward.head": (0, 4),
    }
    assert plan.to_issue("forward", "forward.h.1", 1) == [0, 1, 2, 3]
    assert sum(plan.shard_elements(r) for r in range(4)) == layout.num_elements
    assert [u.label for u in UnitPlan(layout, 2, 1).units] == ["wte", "h.0-1 + wpe", "h.2-3 + ln_f"]
    assert [u.label for u in UnitPlan(layout, 0, 1).units] == ["h.0-3 + wte + wpe + ln_f"]
    first, last = (UnitPlan(p.layout(CONFIG), 1, 2) for p in pipeline_plan(CONFIG, 2)[::1])
    assert [u.label for u in first.units] == ["wte", "h.0 + wpe", "h.1"]
    assert [u.label for u in last.units] == ["wte", "h.2", "h.3 + ln_f"]
    assert last.pieces("backward") == ["backward.head", "backward.h.3", "backward.h.2"]


def test_a_mixture_of_experts_blocks_need_their_experts_units_too():
    """The experts lead the layout: units of their own, needed by their block's pieces."""
    config = dataclasses.replace(CONFIG, layers=2)
    plan = StagePlan.whole(config, experts=ExpertPlan(MoEConfig(experts=4, top_k=2)))
    units = UnitPlan(plan.layout(config), 1, 2)
    assert [u.label for u in units.units] == ["h.0 experts", "h.1 experts", "wte", "h.0 + wpe", "h.1 + ln_f"]
    assert units.needs("forward.h.0") == (0, 3) and units.needs("backward.h.1") == (1, 4)
    assert units.last_use("backward")["backward.h.0"] == (0,)  # wpe's unit waits for the embedding


def test_the_timeline_hides_gathers_behind_compute_only_with_prefetch():
    """Two blocks, the embedding's unit free: a gather takes 1, a reduce-scatter 1, each of the 8
    pieces 2. Without prefetch each block's gather is waited for, and in backward h.0's gather is
    queued behind h.1's reduce-scatter (5 waited); one ahead, only the first gather of each pass
    is (2); without wrapping, the whole model's gather before each pass and its reduce-scatter after."""
    plan = UnitPlan(ParamLayout.for_config(dataclasses.replace(CONFIG, layers=2)), 1, 2)
    compute = {p: 2.0 for d in ("forward", "backward") for p in plan.pieces(d)}
    gather, scatter = [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]
    eager = unit_timeline(plan, compute, gather, scatter, prefetch=0)
    ahead = unit_timeline(plan, compute, gather, scatter, prefetch=1)
    assert eager.waited_s == 5.0 and eager.compute_end_s == 16 + 5 and eager.end_s == 22
    assert ahead.waited_s == 2.0 and ahead.compute_end_s == 16 + 2 and ahead.end_s == 19
    assert ahead.comm_s == eager.comm_s == 6.0  # 2 gathers forward, 2 backward, 2 reduce-scatters
    whole = UnitPlan(plan.layout, 0, 2)  # no wrapping: one gather of everything before any compute
    one = unit_timeline(whole, compute, [3.0], [3.0], prefetch=1)
    assert one.waited_s == 6.0 and one.end_s == 16 + 6 + 3
    # a wait costs 0.5 more to resume from (a late peer, the hand-back): 4 waits without prefetch,
    # 2 with it; a gather that is whole when its piece starts costs nothing more
    late = unit_timeline(plan, compute, gather, scatter, prefetch=0, resume_s=0.5)
    assert late.waited_s == 5.0 + 4 * 0.5 and late.compute_end_s == 16 + 7
    late = unit_timeline(plan, compute, gather, scatter, prefetch=1, resume_s=0.5)
    assert late.waited_s == 2.0 + 2 * 0.5 and late.compute_end_s == 16 + 3


def test_the_formulas_in_this_labs_bytes():
    psi, n = 1000, 4
    assert [model_state_bytes(s, psi, n, 8) for s in range(4)] == [32000, 20000, 14000, 8000]
    assert [model_state_formula(s, 8) for s in range(4)] == ["32Ψ", "16Ψ + 16Ψ/N", "8Ψ + 24Ψ/N", "32Ψ/N"]
    assert model_state_formula(2, 2) == "2Ψ + 6Ψ/N"  # b = 2 (the paper's fp16 has K = 12 instead)
    assert sent_bytes_per_rank(0, psi, n, 8) == sent_bytes_per_rank(2, psi, n, 8) == 2 * 0.75 * psi * 8
    assert sent_bytes_per_rank(3, psi, n, 8) == 3 * 0.75 * psi * 8 and sent_bytes_per_rank(3, psi, 1, 8) == 0
    assert sent_formula(3) == "3 (N-1)/N Ψ b" and sent_formula(2, micro_batches=4) == "5 (N-1)/N Ψ b"
    assert sent_formula(3, 2, Sharding(reshard_after_forward=False)) == "4 (N-1)/N Ψ b"


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sets,key,says",
    [
        (["params.mode=[zero3]", "params.unit_blocks=3"], "params.unit_blocks",
         "a unit of 3 blocks is larger than the model's 2"),
        (["params.prefetch=-1"], "params.prefetch", "must be >= 0 (0: gather a unit when it is needed), got -1"),
        (["params.unit_blocks=-2"], "params.unit_blocks", "must be >= 0"),
        (["params.micro_batches=3"], "params.micro_batches", "must divide a rank's 16 rows"),
        (["params.baseline=mpi"], "params.baseline", "expected one of 'ddp', 'fsdp' or null"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_key(capsys, runs_dir, sets, key, says):
    args = ["run", "train", "--ranks", "2", "--out", str(runs_dir)]
    code = cli.main([*args, *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"--set {next(s for s in sets if s.startswith(key + '='))}: " in err[0] and says in err[0]


def test_a_unit_larger_than_the_model_is_refused_only_where_units_are_used():
    Params(mode=(BY_NAME["bucketed"],), unit_blocks=5)  # no unit mode: nothing to cut
    with pytest.raises(ParamError, match="larger than the model's 2"):
        Params(mode=(BY_NAME["zero2"],), unit_blocks=5)


@pytest.mark.timeout(60)
def test_baseline_fsdp_without_torch_is_one_line_and_exit_2(runs_dir):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from playground.cli import main\n"
        f"sys.exit(main(['run', 'train-modes', '--baseline', 'fsdp', '--out', {str(runs_dir)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert (
        "key 'params.baseline': fsdp needs PyTorch: torch is not installed: pip install torch==2.13.0"
        in lines[0]
    )


# -- against FSDP2 ---------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_fsdp2_on_the_same_weights_and_batches_loses_the_same(tmp_path):
    """torch's fully_shard per block over Gloo, float64: its losses (the ranks' mean) within 1e-12 of
    our zero3's (measured: 1e-15), its local shards of parameters, gradients and Adam's states the
    formula's 32 Psi / N."""
    need(importable("torch"), NO_TORCH)
    params = Params(
        layers=4, d_model=16, heads=2, context=16, batch=8, steps=STEPS, seed=1, lr=1e-2, dtype="float64",
        mode=(BY_NAME["zero3"],),
    )  # fmt: skip
    records = fsdp_baseline.run(params, 2, tmp_path)
    setup = params.setup()
    with pin_blas_threads(1):
        ours = run_local(2, lambda comm: train_mode(comm, BY_NAME["zero3"], setup, params.sampler, STEPS)[0])
    losses = [s["loss"] for s in ours[0]["steps"]]
    theirs = [np.mean([r[i]["loss"] for r in records]) for i in range(STEPS)]
    assert theirs == pytest.approx(losses, rel=1e-12)
    state = sum(records[0][-1][k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes"))
    assert state == pytest.approx(model_state_bytes(3, CONFIG.num_params, 2, 8), rel=0.01)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_a_strategy_taken_up_from_its_state_goes_on_bit_for_bit(mode):
    """A checkpoint's part (`state()`, plus the model's parameters for ZeRO-2): a fresh strategy given
    it after step 1 takes step 2 exactly as the one that never stopped (ZeRO-3 exchanges its shards'
    sums again before its first gather)."""
    batch = lambda step, comm: SAMPLER.rank_batch(step, comm.rank, comm.size)  # noqa: E731

    def body(comm):
        from playground.training.checks import StepChecks
        from playground.training.step import DataParallel

        def step(dp, s):
            checks = StepChecks(comm, s, BY_NAME[mode], np.float64)
            dp.train_step(s, *batch(s, comm), checks.gradients)
            checks.params(dp.gradients)

        first, again = DataParallel(comm, BY_NAME[mode], SETUP), DataParallel(comm, BY_NAME[mode], SETUP)
        step(first, 0)
        state = {k: v.copy() for k, v in first.gradients.state().items()}
        again.model.params[...] = first.model.params  # ZeRO-2's whole parameters (ZeRO-3's: empty)
        again.gradients.load_state(state)
        step(first, 1)
        step(again, 1)
        out = first.gradients.full_params(), again.gradients.full_params()
        first.close(), again.close()
        return out

    with pin_blas_threads(1):
        for went_on, restarted in run_local(2, body):
            assert np.array_equal(went_on, restarted)
