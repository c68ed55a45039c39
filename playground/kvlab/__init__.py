"""The KV-cache lab (lecture 4.3-4.6, exercises 9 and 10; docs/kvcache.md): client ranks replay the
lecture's workloads against the paged KV-cache server (playground/kvcache/) under each policy.

- `replay`: what a client rank runs (the 4.6 requests under the engine's admission rule, the fork
  workloads, the closed-loop benchmark);
- `kvcache_stats`: the clients' op latencies; `kvcache_report`: tables, the memory plot, checks.
The node is `nodes.kvcache`.
"""
