"""A paged KV-cache server (vLLM's block manager over ZeroMQ), the policies it is compared with,
and a model served from its pool with continuous batching (docs/kvcache.md, docs/serving.md).

Pure parts, testable without processes: `block_manager` (paged), `contiguous` (first-fit and
reserve-max), `policies` (choose one by name), `protocol` (wire encode/decode), `kv_pool` (the
memory, one plane per layer and K or V), `attention` (decode attention through block tables, numpy
or native/attention.c), `server` (`Server.handle` and `step` plus a thin ROUTER loop),
`workloads`, `client`, `replay` (client-side replay of the lecture's workloads),
`kvcache_stats` / `kvcache_report` / `plots` (the lab's figures, tables and plot). The engine, in
nano-vllm's shape: `sequence`, `scheduler`, `model_runner`, `llm_engine`. `host` is rank 0's side
of the lab (the server on its own thread); `serving_host`, `serving_clients`, `serving_stats`,
`serving_report` are the serving node's; `attention_bench` / `attention_report` the kernel's.
The wire protocol is documented in docs/protocols.md.
"""
