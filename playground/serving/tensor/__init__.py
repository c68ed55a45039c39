"""Tensor-parallel serving (docs/parallelism.md): the KV-cache engine on t ranks, each over its shard
of the model's heads and MLP units and a pool of its heads' KV; decode step time against t measured,
modelled and simulated. The node is `nodes.serving_tensor`.

- `decode`: one shard's run of a decode batch, the same function launched and simulated;
- `steptime_model`: rest + layers x (block / t + 2 all-reduces), calibrated on one process;
- `simulate`: the decode batch on t simulated ranks (SimWorld), compute measured as it runs;
- `tensor_report`: tokens checked against one process, the three columns per t, the plot.
"""
