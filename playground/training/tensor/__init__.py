"""Tensor parallelism (Megatron-LM) on the training lab's transformer (docs/parallelism.md): each
block's heads and MLP units split over the ranks of `grid.tensor` by a plan
(`playground.transformer.tensor_plan`), the data-parallel modes across replicas on a data x tensor
grid, one process beside every run.

The node is `nodes.train_tensor`; what it runs, one concept per module:

- `step`: one step of a shard: forward and backward with the tensor group's all-reduces inside
  them, the data-parallel mode's strategy over the data group, the optimizer, the shards' checks
  (`TensorParallel`);
- `loop`: one t's steps in the training lab's loop, and the gaps to one process;
- `steptime_model`: compute / t and the all-reduces from the alpha-beta model;
- `tensor_report`: the records -> the step and its phases per t beside the model, the plot;
- `torch_baseline` (parent), `torch_worker` (torch, imported by the workers only): the same
  training with torch.distributed.tensor.parallel's ColwiseParallel / RowwiseParallel over Gloo.
"""
