"""A pipeline step in one process (a rank per thread): every data-parallel mode of the training lab
on a 2 x 2 data x pipeline grid equals one process, the tied embedding's copies stay identical, and
the stage's gradients accumulate over the micro-batches; the trace's bubble arithmetic on a
synthetic step."""

import numpy as np
import pytest

from nodes.train_pipeline import Params, main
from playground.comm.group import Grid
from playground.comm.world import run_local
from playground.training.modes import BY_NAME, NAMES
from playground.training.pipeline import pipeline_stats
from playground.training.pipeline.schedules import SCHEDULES
from playground.training.pipeline.step import PipelineParallel
from playground.transformer import Transformer, pin_blas_threads
from playground.transformer.plan import pipeline_plan

SMALL = {
    "layers": 2,
    "d_model": 16,
    "heads": 2,
    "context": 8,
    "batch": 8,
    "steps": 2,
    "calibration_repeats": 1,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", NAMES)
def test_every_data_parallel_mode_on_a_2x2_grid_equals_one_process(mode):
    params = Params(**SMALL, pipeline=2, micro_batches=(1, 2), mode=BY_NAME[mode])
    with pin_blas_threads(1):
        results = run_local(4, lambda comm: main(comm, params))
    assert [(r["stage"], r["data_index"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in results:
        for run in r["runs"]:
            if r["data_index"] == 0:
                assert run["reference"]["param_gap"] <= 1e-12, (mode, r["stage"], run)
            other = next(x for x in results if x["stage"] == r["stage"] and x is not r)
            assert run["hash"] == other["runs"][run["run"]]["hash"]  # the replicas bit-identical


@pytest.mark.timeout(60)
def test_gradients_accumulate_over_micro_batches_and_the_tied_copies_agree():
    """Stage 0 and stage 1 of one replica, 4 micro-batches of GPipe: after the pipeline and the tied
    exchange each stage holds its share of the whole batch's gradient, and both copies of wte the
    same sum, to rounding of the whole model's."""
    params = Params(**SMALL, pipeline=2)
    setup, sampler, config = params.setup(), params.sampler, params.model_config

    inputs, targets = sampler.rank_batch(0)
    whole = Transformer(config, seed=0)
    whole.forward(inputs, targets)
    whole.backward()

    def body(comm):
        grid = Grid(comm, data=1, pipeline=2)
        plan = pipeline_plan(config, 2)[grid.pipeline_index]
        pp = PipelineParallel(comm, grid, plan, BY_NAME["after_backward"], setup, SCHEDULES["gpipe"], 4)
        pp.stage.run(pp.actions, pp.micro_batches(inputs, targets), setup.global_tokens, 0, 0)
        pp._tie()
        views = pp.model.layout.views(pp.buffers.grads)
        pp.close()
        return {name: v.copy() for name, v in views.items()}

    stages = run_local(2, body)
    scale = np.max(np.abs(whole.grads))
    for grads in stages:
        for name, g in grads.items():
            assert np.max(np.abs(g - whole.g[name])) <= 1e-14 * scale, name
    assert np.array_equal(stages[0]["wte"], stages[1]["wte"])


def test_the_bubble_of_a_synthetic_step():
    """Two stages, one micro-batch, forward 1 s and backward 2 s each: 6 s of makespan, each stage
    busy 3: bubble 1/2 = (p - 1) / (m + p - 1)."""
    stages = {
        0: [("F", 0, 10.0, 11.0), ("B", 0, 14.0, 16.0)],
        1: [("F", 0, 11.0, 12.0), ("B", 0, 12.0, 14.0)],
    }
    got = pipeline_stats.step_bubble(stages, 2)
    assert got["makespan_s"] == 6.0 and got["busy_s"] == [3.0, 3.0] and got["idle_s"] == [3.0, 3.0]
    assert got["bubble"] == 0.5


def test_a_hop_counts_only_messages_the_receiver_waited_for():
    """Send at 100 us, the receiver waiting since 50 us and done at 130: a 30 us delivery. A message
    that was parked before its receive (its wait starts after the send) and one on another tag
    (a data-parallel all-reduce) are left out."""

    def send(ts, tag, seq):
        return {
            "name": "send",
            "ts": ts,
            "dur": 5.0,
            "args": {"peer": 1, "tag": tag, "bytes": 64, "seq": seq},
        }

    def wait(ts, dur, tag, seq):
        return {"name": "recv_wait", "ts": ts, "dur": dur, "args": {"peer": 0, "tag": tag, "seq": seq}}

    events = {
        0: [send(100.0, -131072, 0), send(200.0, -131072, 1), send(300.0, -65536, 0)],
        1: [wait(50.0, 80.0, -131072, 0), wait(250.0, 0.0, -131072, 1), wait(290.0, 20.0, -65536, 0)],
    }
    assert pipeline_stats.waiting_hops_s(events, (-131072, -131072 + 8192)) == pytest.approx([30e-6])
