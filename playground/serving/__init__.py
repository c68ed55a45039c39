"""The serving lab (docs/serving.md): a model served from the paged KV-cache pool with continuous
batching (playground/kvcache/), and the paged-attention kernel measured against contiguous runs.

- `served`: rank 0's model and one fresh ModelServer per setup; `serving_clients`: what a client
  rank sends and checks; `serving_stats`, `serving_report`: figures, tables, checks;
- `attention_bench`, `attention_report`: the kernel's sweep (`python -m
  playground.serving.attention_bench`) and its report.
The nodes are `nodes.serving` and `nodes.paged_attention`.
"""
