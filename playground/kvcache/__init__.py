"""A paged KV-cache server (vLLM's block manager over ZeroMQ) and the policies it is compared with.

Pure parts, testable without processes: `block_manager` (paged), `contiguous` (first-fit and
reserve-max), `policies` (choose one by name), `protocol` (wire encode/decode), `server`
(`Server.handle` plus a thin ROUTER loop), `workloads`, `client`, `engine` (client-side replay),
`metrics` and `report` (the lab's figures, tables and plot). `host` is rank 0's side of the lab
(the server on its own thread). The wire protocol is documented in the README, section "Wire
protocol" (README.md#wire-protocol).
"""
