"""Data-parallel training of the numpy transformer (issue 19): DDP's buckets and overlap on real
gradients, ZeRO-1, the invariants checked every step, PyTorch DDP beside it (docs/training.md).

The node is `nodes.train`; what it runs, one concept per module:

- `modes`: the table of modes (per_tensor, bucketed, after_backward, zero1);
- `step`: one data-parallel step of any mode, timed phase by phase (`DataParallel`);
- `reducer`: DDP's buckets (reverse order, caps, first 1 MiB) all-reduced in place on the
  communication thread as backward hands the gradients over (`GradReducer`, `plan_buckets`);
- `zero`: ZeRO-1: reduce-scatter, Adam on this rank's shard, all-gather (`ZeroOne`);
- `checks`: every result checked against the ranks' checksums, every rank's parameters hashed;
- `loop`: one mode's steps on one rank, checked and recorded; `memory`: what a rank holds;
- `training_stats`, `steptime_model`, `training_report`, `plots`: the ranks' records and logs ->
  figures, the model beside them, tables and the loss plot (tested on synthetic records);
- `ddp_baseline` (parent), `ddp_worker`, `ddp_model` (torch, imported by the workers only): the
  same training with torch.nn.parallel.DistributedDataParallel over Gloo.

Shared with the buckets lab, in lower layers: bucket packing and the communication thread
(`playground.collectives.bucketing`, `.comm_thread`), span intersections (`playground.tracing.timeline`),
the baseline worker runner (`playground.launcher.procs`).
"""
