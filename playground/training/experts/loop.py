"""An expert-parallel run on one rank: `train_experts`, `steps` steps of one routing workload and one
permutation, in the training lab's loop (`training.loop.train_steps`: its checks over
`grid.expert_data`, then the expert group's, `ExpertParallel.check_step`); and the one process every
run is compared with (`one_process_moe`: the same model with every expert, the whole batch, the same
workload), whose routing is recorded too, so the report can check that a run routed and dropped
exactly the tokens one process did.
"""

from dataclasses import dataclass

from playground.training.experts.step import ExpertParallel
from playground.training.experts.workloads import Workload
from playground.training.loop import OneProcess, gaps_to_one_process, train_steps
from playground.training.modes import Mode
from playground.training.step import TrainSetup
from playground.transformer import Adam, BatchSampler, Transformer
from playground.transformer.moe import ExpertPlan, MoEConfig
from playground.transformer.plan import StagePlan


@dataclass(frozen=True)
class OneProcessMoE(OneProcess):
    """One process's losses and parameters after each step (`OneProcess`), and what it routed."""

    loads: list[dict]  # per step: the MoE layer's `Loads.record()`


def one_process_moe(
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    moe: MoEConfig,
    workload: Workload,
    expert_parallel: int,
) -> OneProcessMoE:
    """`steps` steps of one process holding every expert, on the whole batch, pushed by `workload` as a
    run of `expert_parallel` ranks per expert group is (its hot rank is the first rank's experts)."""
    model = Transformer(
        setup.config, seed=setup.seed, plan=StagePlan.whole(setup.config, experts=ExpertPlan(moe))
    )
    optimizer = Adam(model.params.size, setup.config.np_dtype, setup.adam)
    losses, params, loads = [], [], []
    assert model.moe is not None  # a plan with experts
    for step in range(steps):
        inputs, targets = sampler.rank_batch(step)
        model.moe.begin(workload.bias(step, inputs.shape[1], moe.experts, moe.top_k, expert_parallel))
        losses.append(model.forward(inputs, targets))
        model.backward()
        optimizer.step(model.params, model.grads, setup.lr_at(step))
        params.append(model.params.copy())
        loads.append(model.moe.loads.record())
    return OneProcessMoE(losses, params, loads)


def train_experts(
    comm,
    grid,
    mode: Mode,
    setup: TrainSetup,
    sampler: BatchSampler,
    steps: int,
    moe: MoEConfig,
    workload: Workload,
    permute: str,
    algorithm: str = "scattered",
    reference: OneProcessMoE | None = None,
    on_step=None,
) -> dict:
    """This rank's record of the run; with `reference`, its gaps to it."""
    ep = ExpertParallel(comm, grid, mode, setup, moe, workload, permute, algorithm)
    log = train_steps(
        ep,
        grid.expert_data,
        mode,
        lambda step: sampler.rank_batch(step, comm.rank, comm.size),
        steps,
        keep_params=reference is not None,
        on_step=on_step,
    )
    record = {
        "workload": workload.name,
        "permute": permute,
        "expert_parallel": grid.expert_size,
        "replicas": grid.replicas,
        "expert_index": grid.expert_index,
        "plan": ep.plan.describe(),
        "steps": log.steps,
        "params_bytes": int(ep.model.params.nbytes),
    }
    if reference is not None:
        gaps = gaps_to_one_process(setup, ep.plan, reference, log.losses, log.snapshots)
        record["reference"] = {**gaps, "loads": reference.loads}
    return record
