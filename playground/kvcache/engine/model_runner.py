"""The model runner: one step of the model for every scheduled sequence at once, attention over
the pool.

A step packs each scheduled sequence's new tokens one after the other (a decode's one token, a
prefill's window) and calls `Transformer.step(tokens, positions, attention)` once. The attention
is `PoolAttention`, built for the step as vLLM builds its attention metadata: the slot each new
token's K and V go to (`policy.slot_list`), a `RunTable` of the decoding sequences for the decode
kernel, and one of the prefilling ones for the causal prefill. Per layer it first writes the new
tokens' keys and values into that layer's planes, then attends: so a prefill that shares another
one's cached prefix blocks in the same step reads them after they were written.
"""

import numpy as np

from playground.kvcache.engine.allocation import AllocationPolicy
from playground.kvcache.engine.attention import decode_attention, prefill_attention, run_table
from playground.kvcache.engine.kv_pool import KVPool
from playground.kvcache.engine.scheduler import Scheduled
from playground.transformer.model import Transformer


class PoolAttention:
    """`Transformer.step`'s attend for one step (see the module doc)."""

    def __init__(self, pool: KVPool, policy: AllocationPolicy, scheduled: list[Scheduled], kernel: str):
        self.pool, self.kernel = pool, kernel
        rows = 0
        write_rows: list[int] = []
        write_slots: list[int] = []
        decode_rows: list[int] = []
        decode_ids: list[int] = []
        prefills: list[tuple[slice, int]] = []  # (rows, first position) of each prefill
        prefill_ids: list[int] = []
        for s in scheduled:
            stop = s.first_position + s.num_new
            if s.write_from < stop:
                write_slots += policy.slot_list(s.seq.seq_id, s.write_from, stop)
                write_rows += range(rows + s.write_from - s.first_position, rows + s.num_new)
            if s.is_decode:
                decode_rows.append(rows)
                decode_ids.append(s.seq.seq_id)
            else:
                prefills.append((slice(rows, rows + s.num_new), s.first_position))
                prefill_ids.append(s.seq.seq_id)
            rows += s.num_new
        self.write_rows = np.asarray(write_rows, dtype=np.int64)
        self.write_slots = np.asarray(write_slots, dtype=np.int64)
        self.decode_rows = np.asarray(decode_rows, dtype=np.int64)
        self.decode_runs = run_table(policy, decode_ids)
        self.prefills, self.prefill_runs = prefills, run_table(policy, prefill_ids)

    def __call__(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        keys, values = self.pool.keys(layer), self.pool.values(layer)
        keys[self.write_slots] = k[self.write_rows]
        values[self.write_slots] = v[self.write_rows]
        out = np.empty(q.shape, dtype=q.dtype)
        if len(self.decode_rows):
            out[self.decode_rows] = decode_attention(
                q[self.decode_rows], keys, values, self.decode_runs, self.kernel
            )
        for i, (rows, first) in enumerate(self.prefills):
            out[rows] = prefill_attention(q[rows], keys, values, self.prefill_runs, i, first)
        return out


class ModelRunner:
    def __init__(self, model: Transformer, pool: KVPool, kernel: str = "native"):
        self.model, self.pool, self.kernel = model, pool, kernel

    def run(self, scheduled: list[Scheduled], policy: AllocationPolicy) -> np.ndarray:
        """The logits (len(scheduled), vocab) of each scheduled sequence's last new token."""
        tokens: list[int] = []
        positions: list[int] = []
        for s in scheduled:
            start = s.seq.window_start + s.first_position
            tokens += s.seq.token_ids[start : start + s.num_new]
            positions += range(s.first_position, s.first_position + s.num_new)
        attention = PoolAttention(self.pool, policy, scheduled, self.kernel)
        logits = self.model.step(np.asarray(tokens, dtype=np.int64), np.asarray(positions), attention)
        last = np.cumsum([s.num_new for s in scheduled]) - 1
        return logits[last]
