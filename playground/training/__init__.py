"""Data-parallel training of the numpy transformer: DDP's buckets and overlap on real gradients,
ZeRO-1, -2 and -3 (FSDP), the invariants checked every step, PyTorch DDP and FSDP2 beside it
(docs/training.md).

The node is `nodes.train`; what it runs, one concept per module:

- `modes`: the table of modes (per_tensor, bucketed, after_backward, zero1, zero2, zero3), each a
  `Mode` that carries its bucket plan, its ZeRO stage and its `GradientStrategy`;
- `step`: one data-parallel step of any mode, one path, timed phase by phase (`DataParallel`);
- `reducer`: the replicated modes' strategy: buckets all-reduced in place, on the communication
  thread as backward hands the gradients over when the mode overlaps, then Adam (`AllReduceBuckets`);
- `zero`: zero1's strategy: reduce-scatter, Adam on this rank's shard, all-gather (`ZeroOne`);
  `whole_params`: what the strategies keeping every parameter answer alike;
- `units`: ZeRO-2 and -3's units (`Sharding`, `UnitPlan`: blocks, chunks, pieces, gather order);
  `sharded`: their common gradient half (`UnitStrategy`); `zero2` (`ZeroTwo`), `zero3`
  (`ZeroThree`: parameters gathered per unit, prefetched, freed); `zero_formulas`: the ZeRO paper's
  memory and traffic in this lab's bytes; `unit_steptime`: their step replayed on two threads;
  `zero_scaling`: where ZeRO-3 stops paying, in the simulator;
- `checks`: every result checked against the ranks' checksums, every rank's parameters hashed;
- `loop`: the lab's one loop: a trainer's steps on one rank (data-parallel here, a pipeline stage
  in `pipeline/`, a tensor shard in `tensor/`, a rank of an expert group in `experts/`), checked
  and recorded; one process trained beside a
  run and the gaps to it, with their tolerance; `memory`: what a rank holds;
- `training_stats`, `steptime_model` (with `comm_cost`: a collective on the calibrated host),
  `training_report` (with `step_model_report`, `sharding_report`, `baseline_report`), `plots`: the
  ranks' records and logs -> figures, the model beside them, tables and the loss plot (tested on
  synthetic records);
- `ddp_baseline` (parent), `ddp_worker`, `ddp_model` (torch, imported by the workers only): the
  same training with torch.nn.parallel.DistributedDataParallel over Gloo; `fsdp_baseline`,
  `fsdp_worker`: with FSDP2's `fully_shard`; `torch_rank`: what the
  DDP, pipelining and tensor-parallel workers do alike (Gloo, our weights and batches, Adam, the
  replicas' average).

Shared with the buckets lab, in lower layers: the one `Bucket`, its planner and the communication
thread with the one traced all-reduce of a bucket (`playground.collectives.bucketing`,
`.comm_thread`), span intersections (`playground.tracing.timeline`), the baseline worker runner
(`playground.launcher.procs`).
"""
