"""The KV-cache server and its clients (docs/protocols.md#the-kv-cache-server).

- `protocol`: the wire format, pure encode/decode (`WireRequest`, error codes, field checks);
- `kv_ops`: `KVServer`, the KV ops on a pool and a policy, leases, stats (no socket);
- `generate`: `ModelServer`, a KVServer that also serves a model on the engine (`generate`);
- `loop`: `serve`, the ZeroMQ ROUTER loop in front of either; `__main__`: the standalone server,
  `python -m playground.kvcache.server`;
- `client`: `KVClient` (DEALER: re-sends what a restarted server lost), `local_client`: `LocalClient`
  (straight into a server object); `answers`: the finished-id table, each generate id answered once;
- `thread`: rank 0's server thread and its wait for the clients' results, for both labs' nodes.
"""
