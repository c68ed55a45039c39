"""Expert parallelism (DeepSpeed-MoE, Megatron-LM) on the training lab's transformer with a mixture of
experts in every block (`playground.transformer.moe`; docs/moe.md): the experts spread over the ranks
of an expert group, tokens dispatched and combined with all-to-alls, data parallelism across the
groups; skewed routing workloads beside the balanced one; one process beside every run.

The node is `nodes.train_moe`; what it runs, one concept per module:

- `grid`: the replicas x expert-group grid and its two groups (`ExpertGrid`);
- `exchange`: the expert group's all-to-alls as the MoE layer calls them, their bytes recorded;
- `workloads`: the routing workloads (balanced, a hot expert, a hot rank, a moving hotspot);
- `step`: one step of a rank: the MoE layer's all-to-alls inside forward and backward, the
  gradients outside the experts over the expert group, the mode over the expert-data group, the
  group's checks (`ExpertParallel`);
- `loop`: a workload's steps in the training lab's loop; one process beside it (`one_process_moe`);
- `moe_stats`, `steptime_model`, `moe_report`, `plots`: the ranks' records -> loads, drops, the
  step's split, the alpha-beta all-to-all and the slowest rank's work beside them, tables and plots
  (tested on synthetic records).
"""
