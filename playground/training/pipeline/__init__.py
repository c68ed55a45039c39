"""Pipeline parallelism on the training lab's transformer (docs/parallelism.md): the blocks split
over stages by a plan (`playground.transformer.plan`), GPipe and 1F1B over micro-batches, the
data-parallel modes across replicas on a data x pipeline grid, one process beside every run.

The node is `nodes.train_pipeline`; what it runs, one concept per module:

- `schedules`: GPipe and 1F1B as data (each stage's actions), their peak activation counts, and
  `validate` (pure);
- `stage`: the thin I/O loop that runs one stage's actions over the pipeline group;
- `step`: one step of a stage: the schedule, the tied embedding's gradient, the data-parallel
  mode's strategy over the data group, the optimizer (`PipelineParallel`);
- `loop`: a schedule's steps in the training lab's loop, the stages' compute calibrated, one
  process's training beside it;
- `steptime_model`: a schedule run in simulated time (calibrated compute, alpha-beta messages,
  shared cores);
- `pipeline_stats`, `pipeline_report`, `plots`: the trace and the records -> the bubble, the
  activations held against their formulas, the model beside them, tables and the drawn schedules;
- `torch_baseline` (parent), `torch_worker` (torch, imported by the workers only): the same
  training with torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over Gloo.
"""
