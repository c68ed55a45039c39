"""The paged KV cache that both KV-cache labs run on, in nano-vllm's split: an engine and, in front
of it, a server (docs/kvcache.md, docs/serving.md; the map: docs/architecture.md).

- `engine/`: where each sequence's tokens live and what runs next, no sockets: the allocation
  policies behind one typed interface, the pool, attention, the scheduler and the LLM engine.
- `server/`: the wire protocol, the server (its KV ops, the model it may serve, the ROUTER loop,
  `python -m playground.kvcache.server`), the client, and rank 0's server thread.
- What the two labs share besides: `workloads` (the lecture's requests, KV data, prompts),
  `stats` (the server's memory samples averaged, leaks), `plots` (memory over time).

The labs themselves are `playground/kvlab/` (the server replayed against, fork workloads) and
`playground/serving/` (a model served from the pool, the attention kernel's benchmark).
"""
