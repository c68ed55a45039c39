"""Data-parallel training of the numpy transformer: DDP's buckets and overlap on real gradients,
ZeRO-1, the invariants checked every step, PyTorch DDP beside it (docs/training.md).

The node is `nodes.train`; what it runs, one concept per module:

- `modes`: the table of modes (per_tensor, bucketed, after_backward, zero1), each a `Mode` that
  carries its bucket plan and its `GradientStrategy`;
- `step`: one data-parallel step of any mode, one path, timed phase by phase (`DataParallel`);
- `reducer`: the replicated modes' strategy: buckets all-reduced in place, on the communication
  thread as backward hands the gradients over when the mode overlaps, then Adam (`AllReduceBuckets`);
- `zero`: zero1's strategy: reduce-scatter, Adam on this rank's shard, all-gather (`ZeroOne`);
- `checks`: every result checked against the ranks' checksums, every rank's parameters hashed;
- `loop`: the lab's one loop: a trainer's steps on one rank (data-parallel here, a pipeline stage
  in `pipeline/`, a tensor shard in `tensor/`, a rank of an expert group in `experts/`), checked
  and recorded; one process trained beside a
  run and the gaps to it, with their tolerance; `memory`: what a rank holds;
- `training_stats`, `steptime_model` (with `comm_cost`: a collective on the calibrated host),
  `training_report`, `plots`: the ranks' records and logs -> figures, the model beside them,
  tables and the loss plot (tested on synthetic records);
- `ddp_baseline` (parent), `ddp_worker`, `ddp_model` (torch, imported by the workers only): the
  same training with torch.nn.parallel.DistributedDataParallel over Gloo; `torch_rank`: what the
  DDP, pipelining and tensor-parallel workers do alike (Gloo, our weights and batches, Adam, the
  replicas' average).

Shared with the buckets lab, in lower layers: the one `Bucket`, its planner and the communication
thread with the one traced all-reduce of a bucket (`playground.collectives.bucketing`,
`.comm_thread`), span intersections (`playground.tracing.timeline`), the baseline worker runner
(`playground.launcher.procs`).
"""
