"""The KV-cache engine, as nano-vllm's `engine/` with vLLM's nouns; no sockets, tested alone.

- `allocation`: `AllocationPolicy`, the check-then-act interface every policy conforms to, and
  `Copy`; `block_manager` (paged), `contiguous` (first fit, reserve-max), `policies` (by name);
- `kv_pool`: the memory, one plane per (layer, K or V); `attention`: decode attention through
  block tables (numpy, or native/attention.c);
- `config`: `EngineConfig`; `sequence`: `GenerateRequest` (a sequence group), `Sequence`;
  `admission`: the admission rule (shared with the KV-cache lab's replayer); `scheduler`;
  `model_runner`; `llm_engine`.
"""
