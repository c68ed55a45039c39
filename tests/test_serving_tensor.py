"""Tensor-parallel serving: the engine on two real processes generates one process's tokens, each
rank over a pool of its own heads; the same code simulated; the simulator's compute charge; the
decode step's model by hand; bad layouts; a killed or hung shard."""

import math
import re

import pytest
from test_failures import finish, launch

from playground.cli.testing import run_scenario
from playground.collectives.tensor_allreduce import allreduce_time_s
from playground.kvcache.engine.tensor_parallel import shard_engine
from playground.models.costs import Link
from playground.serving.tensor.decode import DecodeBatch, decode_batch
from playground.serving.tensor.simulate import simulate_decode, split_heads
from playground.serving.tensor.steptime_model import layer_costs, predict_decode_s
from playground.sim.network import Machine
from playground.sim.transport import SimWorld
from playground.transformer import ModelConfig, Transformer
from playground.transformer.plan import StagePlan
from playground.transformer.tensor_plan import TensorPlan

SMALL = ["params.shapes=[small]", "params.rounds=1", "params.new_tokens=8", "params.simulate=[1,2,4,8]"]
CONFIG = ModelConfig(layers=2, d_model=32, heads=4, context=32)
LINK = Link(50e-6, 1e9)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_two_ranks_generate_one_process_tokens(runs_dir, temperature):
    """The report checks every rank's tokens against the one-process run's and fails the run if one
    differs; the simulated runs against their model's one rank (beyond 4 heads: 8 heads of 8)."""
    sets = [*SMALL, f"params.temperature={temperature}"]
    code, result, out, err = run_scenario("serving-tensor", runs_dir, ranks=2, sets=sets, timeout_s=55)
    assert code == 0, out + err
    rows = {r["t"]: r for r in result["rows"]}
    assert sorted(rows) == [1, 2, 4, 8]
    assert rows[1]["tokens"] == rows[2]["tokens"] == "= 1 process"
    assert rows[4]["tokens"] == rows[8]["tokens"] == "= 1 rank" and rows[8]["sim_heads"] == 8
    assert math.isnan(rows[4]["measured_ms"]) and rows[4]["sim_ms"] > 0
    assert rows[2]["measured_ms"] > 0 and rows[2]["allreduce_ms"] > 0 and rows[1]["allreduce_ms"] == 0
    assert rows[2]["model_allreduce_ms"] > 0 and rows[2]["sim_allreduce_ms"] > 0
    assert (runs_dir / "latest" / "tensor-decode.png").stat().st_size > 0


def test_a_shards_pool_holds_its_heads_only():
    pools = []
    for t in (1, 2, 4):
        plan = StagePlan.whole(CONFIG, TensorPlan(t - 1, t))
        model = Transformer(CONFIG, seed=0, plan=plan, all_reduce=(lambda x, where: x) if t > 1 else None)
        engine = shard_engine(model, capacity_tokens=64, block_size=16)
        assert engine.pool.keys(0).shape == (64, 4 // t, CONFIG.head_dim)
        pools.append(engine.pool.nbytes)
    assert pools == [pools[0], pools[0] // 2, pools[0] // 4]


@pytest.mark.timeout(30)
def test_the_same_code_simulated_generates_one_ranks_tokens():
    workload = DecodeBatch(batch=3, prompt_tokens=5, new_tokens=6)
    one = simulate_decode(CONFIG, workload, 1, LINK)
    two = simulate_decode(CONFIG, workload, 2, LINK)
    assert two["agree"] and two["tokens"] == one["tokens"]
    assert one["allreduce_s"] == 0 and two["allreduce_s"] > 0 and two["decode_s"] > two["allreduce_s"]
    real = decode_batch(None, CONFIG, workload, clock=lambda: 0.0)  # the launched ranks' own function
    assert real["tokens"] == one["tokens"]
    wide = split_heads(CONFIG, [1, 2, 8, 16])
    assert wide.heads == 16 and wide.d_model == 32 and split_heads(CONFIG, [1, 2, 4]) is None


def test_the_simulator_charges_compute_and_shares_cores():
    def body(comm):
        comm.transport.engine.compute(comm.rank, 0.25)
        return comm.transport.engine.time_of(comm.rank)

    assert SimWorld(Machine(1, 2, LINK, LINK)).run(body) == [0.25, 0.25]
    assert sorted(SimWorld(Machine(1, 2, LINK, LINK, cores=1)).run(body)) == [0.25, 0.5]


def test_the_decode_model_by_hand():
    layer, rest = layer_costs(one_layer_s=3e-3, all_layers_s=10e-3, layers=8)
    assert layer == pytest.approx(1e-3) and rest == pytest.approx(2e-3)
    config = ModelConfig(layers=8, d_model=512, heads=8)
    got = predict_decode_s(config, layer, rest, batch=8, t=4, link=LINK)
    # 2 all-reduces per block of 8 x 512 x 4 = 16 KiB; at 4 ranks `auto` is recursive doubling:
    # log2(4) = 2 exchanges of the whole buffer, each alpha + S / beta
    one = 2 * (50e-6 + 16384 / 1e9)
    assert allreduce_time_s(16384, 4, LINK) == pytest.approx(one)
    assert got["allreduce_s"] == pytest.approx(16 * one)
    assert got["step_s"] == pytest.approx(2e-3 + 8 * 1e-3 / 4 + 16 * one)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "ranks,sets,key,says",
    [
        (2, ["params.tensor=[4]"], "params.tensor", "t = 4 ranks is larger than the run's 2 ranks"),
        (2, ["params.tensor=[3]"], "params.tensor", "must divide the model's 4 attention heads"),
        (2, ["params.simulate=[1,3]"], "params.simulate", "each t must divide d_model = 64"),
        (2, ["params.new_tokens=60"], "params.new_tokens", "must fit the context of 64"),
    ],
)
def test_bad_layouts_are_one_line_naming_the_key(runs_dir, ranks, sets, key, says):
    code, _, out, err = run_scenario(
        "serving-tensor", runs_dir, ranks=ranks, sets=[*SMALL, *sets], timeout_s=25
    )
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0] and says in lines[0] and "Traceback" not in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action,cause", [("kill", "killed by SIGKILL"), ("hang", "unresponsive")])
def test_a_killed_or_hung_shard_fails_the_run_naming_it_and_the_layer(runs_dir, action, cause):
    """Shard 1 fails in the middle of decoding: the root cause is rank 1; shard 0 says which layer's
    all-reduce it was in (killed) or had just left (hung: rank 1 sent its half, then stopped)."""
    proc = launch(
        ["run", "serving-tensor", "--ranks", "2", "--out", str(runs_dir)]
        + [a for s in [*SMALL, "params.rounds=2"] for a in ("--set", s)]
        + ["--set", "fault.rank=1", "--set", f"fault.action={action}", "--set", "fault.after_ops=40"]
        + ["--set", "timeout_s=3"]
    )
    out, err, leftovers = finish(proc, timeout_s=40)
    assert proc.returncode == 1 and not leftovers, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 1" in root and cause in root, err
    peer = " ".join(line for line in err.splitlines() if "then rank 0" in line)
    assert re.search(r"(in|after) h\.\d\.(attn|mlp)\.c_proj allreduce\[tensor2\]", peer), err
